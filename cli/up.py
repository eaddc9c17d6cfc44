"""``ferryman up``: the whole platform on this machine, one process per service.

Registry (SQLite under the data dir, migrated), demo models (built and registered),
N nodes, and a router hosting the batcher (handed items in process, no stream) and the
quota service (in memory, or on Redis with --redis-url); a demo tenant whose new key is
printed once. Node threads and batches at once are sized to the host (``--json``
reports them). ``up`` supervises its children: one that crashes is restarted with
backoff while the others serve on; SIGINT, SIGTERM or SIGHUP to ``up`` stops every
child, by PID; and on Linux every child is told to stop when ``up`` itself dies
(``PR_SET_PDEATHSIG``), even by SIGKILL.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import grpc
import numpy as np
import typer
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ferryman.sdk.client import Client
from ferryman.sdk.errors import FerrymanError
from ferryman_server.admin_ui.auth import PASSWORD_ENV
from ferryman_server.cli.context import engine, settings
from ferryman_server.cli.output import console, fail
from ferryman_server.cli.supervisor import Platform
from ferryman_server.kernel.config import CommonSettings
from ferryman_server.kernel.host import node_torch_threads, usable_cores
from ferryman_server.kernel.net import check_listenable, free_port, free_ports
from ferryman_server.kernel.security import Security, sync_channel
from ferryman_server.registry.keys import NewKey
from ferryman_server.registry.reader import RegistryReader
from ferryman_server.registry.writer import RegistryWriter

DEMO_TENANT = "demo"
CONSOLE_PASSWORD_BYTES = 12
HTTP_OK = 200
DEMO_VERSIONS = {"mlp:1", "minilm:1"}
GENERATIVE_VERSION = "smollm2:1"
"""The generative demo, on the first node (gpu_node/demo/build.py)."""
READY_TIMEOUT_S = 180.0
BUILD_TIMEOUT_S = 600.0
"""The demo build's limit (a first start converts SmolLM2's GGUF: a minute on a small host)."""
POLL_S = 0.2
PROBE_TIMEOUT_S = 5.0
"""Each readiness probe request's deadline."""


def demo_key(writer: RegistryWriter, reader: RegistryReader) -> NewKey:
    """This run's demo key: the demo tenant's earlier keys are revoked, so only the key
    printed last works (each run prints its own, shown once)."""
    demo = next((t for t in reader.tenants() if t.name == DEMO_TENANT), None)
    if demo is None:
        return writer.create_tenant(DEMO_TENANT)
    for prefix in demo.active_keys:
        writer.revoke_key(prefix)
    return writer.issue_key(DEMO_TENANT)


def _console_password(reader: RegistryReader) -> str:
    """A one-run admin password when none is configured (none needed when one is)."""
    if reader.admin_password_hash() or os.environ.get(PASSWORD_ENV):
        return ""
    return secrets.token_urlsafe(CONSOLE_PASSWORD_BYTES)


def snippet(router: str, key: str, ca: str = "", generative: bool = False) -> str:
    tls = f', tls="{ca}"' if ca else ""
    chat = (
        'for chunk in client.chat("smollm2", [{"role": "user", "content": "Name a river."}]):\n'
        '    print(chunk.text, end="", flush=True)\n'
    )
    return (
        "import numpy as np, ferryman\n"
        f'client = ferryman.Client("{router}", api_key="{key}"{tls})\n'
        'print(client.predict("mlp", np.random.rand(1, 512).astype("float32")).outputs["output"])\n'
        'print(client.predict("minilm", ["Ferryman carries requests across."]).outputs["embedding"].shape)\n'
        + (chat if generative else "")
    )


def curl_line(http: str, key: str, ca: str = "") -> str:
    """One request to the OpenAI-compatible door, as a shell line."""
    body = '{"model": "minilm", "input": "Ferryman carries requests across."}'
    cacert = f" --cacert {ca}" if ca else ""
    return f"curl -s{cacert} -H 'Authorization: Bearer {key}' -d '{body}' {http}/v1/embeddings"


def _http_ready(url: str, ca: str) -> bool:
    context = ssl.create_default_context(cafile=ca) if ca else None
    try:
        with urllib.request.urlopen(f"{url}/v2/health/ready", timeout=1, context=context) as response:
            return bool(response.status == HTTP_OK)
    except OSError:
        return False


def is_serving(address: str, security: Security | None = None) -> bool:
    """Whether the gRPC server at ``address`` reports SERVING on grpc.health.v1."""
    try:
        with sync_channel(address, security or Security()) as channel:
            response = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=1)
            return bool(response.status == health_pb2.HealthCheckResponse.SERVING)
    except grpc.RpcError:
        return False


def console_url(port: int, ca: str) -> str:
    """The console's address: https with --tls (it serves the platform's certificate)."""
    return f"{'https' if ca else 'http'}://127.0.0.1:{port}"


def _console_up(port: int, ca: str) -> bool:
    context = ssl.create_default_context(cafile=ca) if ca else None
    try:
        with urllib.request.urlopen(
            f"{console_url(port, ca)}/_stcore/health", timeout=1, context=context
        ) as response:
            return bool(response.status == HTTP_OK)
    except OSError:
        return False


def _answers(router: str, key: str, ca: str, generative: bool) -> bool:
    """Whether the demo models answer through the router: ready means a request works (the
    batcher has seen a ready replica), not only that every process reports SERVING."""
    try:
        # No retries: the readiness loop itself tries again every poll.
        with Client(router, key, timeout=PROBE_TIMEOUT_S, retries=0, tls=ca or False) as client:
            client.predict("mlp", np.zeros((1, 512), np.float32))
            client.predict("minilm", ["ready?"])
            if generative:
                list(client.generate("smollm2", "ready?", max_tokens=1))
    except FerrymanError:
        return False
    return True


def host_tuning(nodes: int, separate_batcher: bool) -> dict[str, object]:
    """What ``up`` sizes to this host (where its setting is not given): each node's torch
    threads, and where the batcher runs. The nodes share the host's cores whatever their
    device, so this needs no torch: ``up`` itself never imports it."""
    from ferryman_server.gpu_node.settings import NodeSettings

    given = NodeSettings()
    cores = usable_cores()
    return {
        "cores": cores,
        "device": given.device,
        "node_torch_threads": given.torch_threads or node_torch_threads(cores, nodes),
        "node_capacity": given.capacity,
        "batcher": "separate process" if separate_batcher else "in the router process",
    }


def demo_built(reader: RegistryReader, generate: bool) -> bool:
    """Whether an earlier run registered every demo version this run serves, and each
    artifact is still there. The build registers only once every artifact is whole, so a
    warm start need not build, or wait for anything before its nodes start."""
    wanted = DEMO_VERSIONS | ({GENERATIVE_VERSION} if generate else set())
    for key in wanted:
        model, _, version = key.partition(":")
        row = next((row for row in reader.versions(model) if row.version == version), None)
        if row is None or not Path(row.artifact_uri).exists():
            return False
    return True


def start_demo_build(platform: Platform, generate: bool, as_json: bool) -> subprocess.Popen[bytes]:
    """``ferryman models demo`` in a child: it imports torch and builds what is missing (a
    minute the first time, SmolLM2's conversion), so ``up`` itself holds none of it. Its
    progress goes to the user's terminal, or to stderr under ``--json``."""
    args = ["models", "demo", *(["--generate"] if generate else [])]
    return platform.run_once(args, sys.stderr if as_json else None)


def wait_demo_build(build: subprocess.Popen[bytes], platform: Platform, stopping: Callable[[], bool]) -> None:
    """Until the demo build has registered every demo version; its failure is ``up``'s."""
    deadline = time.monotonic() + BUILD_TIMEOUT_S
    while build.poll() is None:
        platform.check()
        if stopping():
            build.terminate()
            raise RuntimeError("stopped while building the demo models")
        if time.monotonic() > deadline:
            build.kill()
            raise TimeoutError("building the demo models took too long")
        time.sleep(POLL_S)
    if build.returncode != 0:
        raise RuntimeError(f"building the demo models failed (exit {build.returncode})")


@dataclass(frozen=True)
class Endpoints:
    router: str
    http: str
    console_port: int
    key: str
    ca: str
    generative: bool


def _wait_ready(platform: Platform, at: Endpoints, nodes: int, security: Security) -> None:
    reader = RegistryReader(engine())
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        platform.check()
        ready = {
            n.name
            for n in reader.nodes()
            if n.lifecycle == "READY" and set(n.loaded_versions) >= DEMO_VERSIONS
        }
        generating = not at.generative or any(GENERATIVE_VERSION in n.loaded_versions for n in reader.nodes())
        if (
            len(ready) >= nodes
            and generating
            and is_serving(at.router, security)
            and _http_ready(at.http, at.ca)
            and _console_up(at.console_port, at.ca)
            and _answers(at.router, at.key, at.ca, at.generative)
        ):
            return
        if time.monotonic() > deadline:
            raise TimeoutError("the platform did not become ready in time")
        time.sleep(POLL_S)


def up(
    nodes: Annotated[int, typer.Option(help="Node processes to start.")] = 2,
    listen: Annotated[str, typer.Option(help="Router (public endpoint) host:port.")] = "127.0.0.1:7001",
    http_listen: Annotated[
        str, typer.Option(help="Router's HTTP doors host:port (OIP REST /v2, OpenAI /v1).")
    ] = "127.0.0.1:7080",
    redis_url: Annotated[str, typer.Option(help="Keep quotas in Redis instead of memory.")] = "",
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON line once ready.")] = False,
    tls: Annotated[
        bool, typer.Option(help="TLS on every port, with a local CA made in the data dir (tls/ca.pem).")
    ] = False,
    generate: Annotated[
        bool, typer.Option(help="Serve the generative demo (SmolLM2, on the first node) too.")
    ] = True,
    workers: Annotated[
        int, typer.Option(help="Router processes sharing the public port (then the batcher runs apart).")
    ] = 1,
    separate_batcher: Annotated[
        bool,
        typer.Option(
            help="Run the batcher as its own process behind a gRPC stream (the Kubernetes "
            "topology) instead of inside the router's."
        ),
    ] = False,
) -> None:
    """Run the whole platform locally; Ctrl-C stops it."""
    from ferryman_server.registry.migrate import upgrade

    if nodes < 1 or workers < 1:
        fail("--nodes and --workers must be at least 1")
    # N routers share the configured batcher: one inside each would split every batch N ways.
    separate_batcher = separate_batcher or workers > 1
    try:
        check_listenable(listen)  # before minutes of model building, not after
        check_listenable(http_listen)
    except OSError as exc:
        fail(str(exc))
    upgrade(engine())
    writer, reader = RegistryWriter(engine(), actor="ferryman-up"), RegistryReader(engine())
    platform = Platform()
    build = None
    if not demo_built(reader, generate):
        if not as_json:
            console.print("building demo models (first run takes a minute)...")
        # Beside the services' start: only the nodes wait for the demo versions.
        build = start_demo_build(platform, generate, as_json)
    key = demo_key(writer, reader)

    ca = ""
    if tls:
        from ferryman_server.cli.certs import local_pki

        pki = local_pki(settings().data_dir / "tls")
        ca = str(pki.ca)
        # Every child reads these: TLS on every listener, peers verified with the CA.
        os.environ.update(FERRYMAN_TLS_CERT=str(pki.cert), FERRYMAN_TLS_KEY=str(pki.key), FERRYMAN_TLS_CA=ca)
    # Durable jobs without a Redis: in the registry database (every child reads this).
    os.environ.setdefault("FERRYMAN_JOBS_IN_REGISTRY", "true")
    security = CommonSettings().security()
    tuning = host_tuning(nodes, separate_batcher)
    # The nodes share this host's cores: each gets its part unless threads were set.
    node_env = {"FERRYMAN_NODE_TORCH_THREADS": str(tuning["node_torch_threads"])}
    batcher = f"127.0.0.1:{free_port()}"
    quota_internal = f"127.0.0.1:{free_port()}"
    console_port = free_port()
    names = ["router", "batcher", "rollouts", *(f"node-{i + 1}" for i in range(nodes))]
    metrics = {name: f"127.0.0.1:{free_port()}" for name in names}
    # Router worker i serves its metrics on the first worker's port + i.
    base = free_ports(workers)
    metrics.update(
        {("router" if i == 0 else f"router-{i + 1}"): f"127.0.0.1:{base + i}" for i in range(workers)}
    )
    stop_requested = False

    def request_stop(*_: object) -> None:
        nonlocal stop_requested
        stop_requested = True

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, request_stop)
    rollouts = f"127.0.0.1:{free_port()}"
    # Every port it starts, by what listens there (--json; what an operator's tools dial).
    addresses: dict[str, str] = {"router": listen, "http": http_listen, "quota_internal": quota_internal}
    addresses["batcher"] = batcher if separate_batcher else f"{listen} (in the router's process)"
    addresses["rollouts"] = rollouts
    addresses["console"] = f"127.0.0.1:{console_port}"

    def start_nodes() -> None:
        for i in range(nodes):
            name = f"node-{i + 1}"
            node_listen = f"127.0.0.1:{free_port()}"
            addresses[name] = node_listen
            node_args = ["serve", "node", "--listen", node_listen, "--name", name]
            platform.start_command(name, [*node_args, "--metrics-listen", metrics[name]], node_env)

    try:
        if build is None:
            start_nodes()  # the long pole: first
        if separate_batcher:
            platform.start("batcher", "batcher", "--listen", batcher, "--metrics-listen", metrics["batcher"])
        router_args = [
            "serve",
            "router",
            "--listen",
            listen,
            *(["--batchers", batcher] if separate_batcher else ["--local-batcher"]),
            *(["--workers", str(workers)] if workers > 1 else []),
            "--metrics-listen",
            metrics["router"],
            "--internal-listen",
            quota_internal,
            "--http-listen",
            http_listen,
        ]
        platform.start_command(
            "router",
            [*router_args, *(["--redis-url", redis_url] if redis_url else [])],
            None if separate_batcher else {"FERRYMAN_BATCHER_METRICS_LISTEN": metrics["batcher"]},
        )
        # The rollout controller judges each step from every router worker's metrics.
        routers = [f"http://{address}/metrics" for n, address in metrics.items() if n.startswith("router")]
        platform.start(
            "rollouts",
            "rollouts",
            "--listen",
            rollouts,
            "--metrics-listen",
            metrics["rollouts"],
            *(arg for url in routers for arg in ("--router-metrics", url)),
        )
        console_env = {
            "FERRYMAN_CONSOLE_METRICS_URLS": ",".join(
                f"http://{address}/metrics" for address in metrics.values()
            ),
            "FERRYMAN_CONSOLE_QUOTA_ADDRESS": quota_internal,
        }
        password = _console_password(reader)
        if password:
            console_env[PASSWORD_ENV] = password
        platform.start_command("console", ["admin", "--port", str(console_port)], console_env)
        if build is not None:
            wait_demo_build(build, platform, lambda: stop_requested)
            start_nodes()
        http = f"{'https' if tls else 'http'}://{http_listen}"
        at = Endpoints(listen, http, console_port, key.plaintext, ca, generate)
        _wait_ready(platform, at, nodes, security)
        code = snippet(listen, key.plaintext, ca, generate)
        curl = curl_line(http, key.plaintext, ca)
        if as_json:
            print(
                json.dumps(
                    {
                        "router": listen,
                        "http": http,
                        "api_key": key.plaintext,
                        "tenant": DEMO_TENANT,
                        "tls_ca": ca,
                        "console_url": console_url(console_port, ca),
                        "console_password": password,
                        "metrics": {name: f"http://{address}/metrics" for name, address in metrics.items()},
                        "addresses": addresses,
                        "snippet": code,
                        "curl": curl,
                        "pid": os.getpid(),
                        "pids": platform.pids(),
                        "tuning": tuning,
                    }
                ),
                flush=True,
            )
        else:
            console.print(
                f"\n[bold green]Ferryman is up[/bold green] at [bold]{listen}[/bold] "
                f"({nodes} node(s), quotas {'on Redis' if redis_url else 'in memory'})"
            )
            console.print(f"demo tenant API key (shown once): [bold]{key.plaintext}[/bold]", soft_wrap=True)
            where = f"console: {console_url(console_port, ca)}"
            if password:
                where += f" (admin password for this run: [bold]{password}[/bold])"
            console.print(where, soft_wrap=True)
            console.print(f"HTTP (OIP v2 REST on /v2, OpenAI-compatible on /v1): {http}", soft_wrap=True)
            console.print("try it (Python):\n")
            print(code, flush=True)
            console.print("or with curl:\n")
            print(curl, "\n", flush=True)
            console.print("Ctrl-C stops everything.")
        while not stop_requested:
            platform.supervise(lambda line: print(f"ferryman up: {line}", file=sys.stderr, flush=True))
            time.sleep(POLL_S)
    except (RuntimeError, TimeoutError) as exc:
        if build is not None:
            build.kill()
        platform.stop()
        fail(str(exc))
    platform.stop()
    if not as_json:
        console.print("stopped.")
