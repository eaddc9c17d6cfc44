"""A registry, two real in-process nodes and a real batcher, over gRPC on free ports."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import ServiceMain, ServiceThread
from node_helpers import POISON, node_settings

from ferryman_server.batcher.server import serve_batcher
from ferryman_server.batcher.settings import BatcherSettings
from ferryman_server.gpu_node.demo import echo, mlp
from ferryman_server.gpu_node.server import serve_node
from ferryman_server.kernel.config import CommonSettings
from ferryman_server.kernel.net import free_port
from ferryman_server.registry.db import make_engine
from ferryman_server.registry.migrate import upgrade
from ferryman_server.registry.reader import RegistryReader
from ferryman_server.registry.writer import RegistryWriter, VersionSpec

NODES = ("bn1", "bn2")
REGISTRY_REFRESH_S = 0.1
"""Registry re-reads in tests: changes show within a tenth of a second."""
SLOW_MS = 300
READY_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Platform:
    batcher: str
    metrics: str
    registry_url: str
    common: CommonSettings
    artifacts: Path


def register(
    writer: RegistryWriter,
    model: str,
    version: str,
    artifact: Path,
    fmt: str,
    schema: Mapping[str, Any],
    *,
    handler: str = "",
    max_batch: int = 32,
    delay_ms: float = 10.0,
    nodes: tuple[str, ...] = ("*",),
    cacheable: bool = False,
    published: bool = True,
    owners: tuple[str, ...] = (),
    price_per_1k_tokens: float = 0.0,
) -> None:
    writer.register_version(
        VersionSpec(
            model=model,
            version=version,
            artifact=str(artifact),
            format=fmt,
            io_schema=schema,
            handler=handler,
            max_batch_size=max_batch,
            max_queue_delay_ms=delay_ms,
            cacheable=cacheable,
            published=published,
            owners=owners,
            price_per_1k_tokens_usd=price_per_1k_tokens,
        )
    )
    for node in nodes:
        writer.place(model, version, node)


def wait_for_replicas(reader: RegistryReader, names: tuple[str, ...], versions: set[str]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        ready = {n.name: set(n.loaded_versions) for n in reader.nodes() if n.lifecycle == "READY"}
        if all(versions <= ready.get(name, set()) for name in names):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"nodes {names} never served {versions}: {ready}")
        time.sleep(0.1)


def node_main(name: str, common: CommonSettings, metrics_listen: str = "") -> ServiceMain:
    """A registered in-process node with a fast heartbeat."""
    settings = node_settings(
        name=name, use_registry=True, heartbeat_interval_s=0.2, capacity=2, metrics_listen=metrics_listen
    )
    return lambda stop, ready: serve_node(settings, common, stop, ready)


@contextmanager
def run_platform(root: Path) -> Iterator[Platform]:
    """Registry with test versions, nodes bn1 and bn2, and a batcher; stopped on exit."""
    url = f"sqlite:///{root / 'registry.db'}"
    engine = make_engine(url)
    upgrade(engine)
    writer = RegistryWriter(engine, actor="test")
    fx = root / "artifacts"
    plain = echo.write_config(fx / "echo.json")
    register(writer, "mlp", "1", mlp.export_mlp(fx / "mlp.pt2"), "torch_export", mlp.SCHEMA, max_batch=64)
    echo_handler = "ferryman_server.gpu_node.demo.echo:EchoHandler"
    register(writer, "echo", "1", plain, "python", echo.SCHEMA, handler=echo_handler, max_batch=64)
    register(
        writer,
        "echo",
        "poison",
        echo.write_config(fx / "poison.json", poison=POISON),
        "python",
        echo.SCHEMA,
        handler=echo_handler,
        max_batch=16,
        delay_ms=50,
    )
    register(
        writer,
        "echo",
        "slow",
        echo.write_config(fx / "slow.json", delay_ms=SLOW_MS),
        "python",
        echo.SCHEMA,
        handler=echo_handler,
        max_batch=2,
    )
    register(writer, "echo", "cached", plain, "python", echo.SCHEMA, handler=echo_handler, cacheable=True)
    common = CommonSettings(data_dir=root, database_url=url, registry_refresh_s=REGISTRY_REFRESH_S)

    nodes = [ServiceThread(node_main(name, common), name) for name in NODES]
    for node in nodes:
        node.start()
    wait_for_replicas(RegistryReader(engine), NODES, {"mlp:1", "echo:1", "echo:poison", "echo:slow"})
    metrics = f"127.0.0.1:{free_port()}"
    settings = BatcherSettings(
        listen="127.0.0.1:0",
        metrics_listen=metrics,
        max_queue_rows=64,
        retry_backoff_s=0.02,
        breaker_cooldown_s=0.5,
    )
    batcher = ServiceThread(lambda stop, ready: serve_batcher(settings, common, stop, ready), "batcher")
    address = batcher.start()
    yield Platform(
        batcher=address, metrics=f"http://{metrics}/metrics", registry_url=url, common=common, artifacts=fx
    )
    batcher.stop()
    for node in nodes:
        node.stop()
    engine.dispose()
