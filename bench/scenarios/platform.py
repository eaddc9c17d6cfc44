"""Ferryman for a scenario: a fresh registry, the demo models, and one process per service.

Like ``ferryman up`` (whose process handling it shares) but with the knobs scenarios turn:
torch threads, node capacity, batch sizes, batcher settings, quotas, Redis. Caches are off so
every request computes; processes are stopped by PID on exit.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ferryman_server.cli.supervisor import Platform
from ferryman_server.cli.up import is_serving
from ferryman_server.gpu_node.demo import echo
from ferryman_server.gpu_node.demo.build import build_demo_artifacts
from ferryman_server.kernel.host import node_torch_threads, usable_cores
from ferryman_server.kernel.net import free_port
from ferryman_server.registry.db import make_engine
from ferryman_server.registry.migrate import upgrade
from ferryman_server.registry.reader import RegistryReader
from ferryman_server.registry.specs import QuotaLimits
from ferryman_server.registry.writer import RegistryWriter, VersionSpec

TENANT = "bench"
READY_TIMEOUT_S = 180.0
POLL_S = 0.2
SETTLE_S = 1.0
"""The batcher's and router's first registry refresh after the nodes are ready."""
MODELS_DIR = Path(tempfile.gettempdir()) / "ferryman-bench-models"
"""Built demo artifacts, reused across runs (MiniLM takes a while to build)."""


@dataclass(frozen=True)
class PlatformSpec:
    """A platform as ``ferryman up`` would run it, unless a field says otherwise."""

    nodes: int = 1
    torch_threads: int = 0
    """0: sized to the host, as ``ferryman up`` does (``ferryman_server.kernel.host``)."""
    node_capacity: int = 0
    """Batches computing at once per node; 0: the node's default."""
    max_batch: Mapping[str, int] = field(default_factory=lambda: {"mlp": 64})
    models: tuple[str, ...] = ("mlp",)
    quota: QuotaLimits | None = None
    redis_url: str = ""
    separate_batcher: bool = False
    """The batcher in its own process behind a gRPC stream (the Kubernetes topology)
    instead of inside the router's, as ``ferryman up`` runs it."""
    workers: int = 1
    """Router processes on the one port (more than one runs the batcher apart)."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Extra settings for every service (each reads its own ``FERRYMAN_<SERVICE>_`` prefix)."""


@dataclass(frozen=True)
class Running:
    address: str
    """The router: the platform's public endpoint."""
    key: str
    pids: list[int]
    http: str
    """The router's HTTP doors (host:port)."""
    router_pid: int
    registry_url: str
    """The platform's registry (a scenario may change routes while it runs)."""


ECHO = "ferryman_server.gpu_node.demo.echo:EchoHandler"
"""``echo``: the cheapest model there is (doubles its input), for measuring the platform alone."""


def _echo_version() -> VersionSpec:
    artifact = echo.write_config(MODELS_DIR / "echo.json")
    return VersionSpec(
        model="echo",
        version="1",
        artifact=str(artifact),
        format="python",
        io_schema=echo.SCHEMA,
        handler=ECHO,
        max_batch_size=64,
        published=True,
    )


def _register(writer: RegistryWriter, spec: PlatformSpec) -> str:
    wanted = set(spec.models) - {"echo"}
    versions = build_demo_artifacts(MODELS_DIR, generative="smollm2" in wanted) if wanted else []
    for version in [*versions, _echo_version()]:
        if version.model not in spec.models:
            continue
        max_batch = spec.max_batch.get(version.model, version.max_batch_size)
        writer.register_version(dataclasses.replace(version, cacheable=False, max_batch_size=max_batch))
        writer.set_route(version.model, {version.version: 100})
        writer.place(version.model, version.version)
    key = writer.create_tenant(TENANT).plaintext
    if spec.quota is not None:
        writer.set_quota(TENANT, spec.quota)
    return key


def _wait_ready(platform: Platform, reader: RegistryReader, router: str, spec: PlatformSpec) -> None:
    wanted = {f"{m}:1" for m in spec.models}
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        platform.check()
        ready = [n for n in reader.nodes() if n.lifecycle == "READY" and set(n.loaded_versions) >= wanted]
        if len(ready) >= spec.nodes and is_serving(router):
            time.sleep(SETTLE_S)
            return
        if time.monotonic() > deadline:
            raise TimeoutError("the platform did not become ready in time")
        time.sleep(POLL_S)


@contextmanager
def ferryman(spec: PlatformSpec) -> Iterator[Running]:
    """The platform, ready to serve; yields the router address, the tenant's key and the PIDs."""
    with tempfile.TemporaryDirectory(prefix="ferryman-bench-") as tmp:
        platform = Platform(quiet=True)
        batcher, router, http = (f"127.0.0.1:{free_port()}" for _ in range(3))
        url = f"sqlite:///{Path(tmp) / 'registry.db'}"
        engine = make_engine(url)
        upgrade(engine)
        key = _register(RegistryWriter(engine, actor="bench"), spec)
        threads = spec.torch_threads or node_torch_threads(usable_cores(), spec.nodes)
        env = {
            "FERRYMAN_DATABASE_URL": url,
            "FERRYMAN_DATA_DIR": tmp,
            "FERRYMAN_LOG_LEVEL": "WARNING",
            # As ``ferryman up``: nodes on one host share its cores.
            "FERRYMAN_NODE_TORCH_THREADS": str(threads),
            "FERRYMAN_NODE_DEVICE": "cpu",
            **({"FERRYMAN_NODE_CAPACITY": str(spec.node_capacity)} if spec.node_capacity else {}),
            **spec.env,
        }
        try:
            for i in range(spec.nodes):
                name = f"bench-{i + 1}"
                args = ["serve", "node", "--listen", f"127.0.0.1:{free_port()}", "--name", name]
                platform.start_command(name, args, env)
            separate = spec.separate_batcher or spec.workers > 1
            if separate:
                platform.start_command("batcher", ["serve", "batcher", "--listen", batcher], env)
            where = ["--batchers", batcher] if separate else ["--local-batcher"]
            router_args = ["serve", "router", "--listen", router, *where, "--http-listen", http]
            router_args += ["--workers", str(spec.workers)]
            if spec.redis_url:
                router_args += ["--redis-url", spec.redis_url]
            platform.start_command("router", router_args, env)
            _wait_ready(platform, RegistryReader(engine), router, spec)
            yield Running(
                address=router,
                key=key,
                pids=[p.pid for _, p in platform.processes],
                http=http,
                router_pid=next(p.pid for name, p in platform.processes if name == "router"),
                registry_url=url,
            )
        finally:
            platform.stop()
            engine.dispose()
