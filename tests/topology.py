"""The platform as the Helm chart runs it, started from the CLI: the quota service on
Redis, 2 routers calling it, 2 batchers (each model owned by one, by rendezvous), 3 nodes,
a PostgreSQL registry, and nginx (Debian's) in front of the routers' HTTP doors as the
ingress. Every service is its own process, stopped by PID."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from batcher_platform import REGISTRY_REFRESH_S, wait_for_replicas
from router_platform import E2E, EMBED, EMBED_VERSIONS, seed, wait_known
from services import unavailable

from ferryman_server.cli.up import is_serving
from ferryman_server.kernel.config import CommonSettings
from ferryman_server.kernel.net import free_port
from ferryman_server.registry.db import make_engine
from ferryman_server.registry.migrate import upgrade
from ferryman_server.registry.reader import RegistryReader
from ferryman_server.registry.writer import RegistryWriter
from ferryman_server.router.batchers import rendezvous

NODES = ("rn1", "rn2", "rn3")
BATCHERS = 2
ROUTERS = 2
START_S = 120.0
STOP_S = 15.0
HEARTBEAT_S = 0.2
POLL_S = 0.1


@dataclass
class Topology:
    """The running processes by role name ("router-0", "batcher-1", "rn2", ...)."""

    e2e: E2E
    """The view the end-to-end suite takes: its first router, and the metrics of the batcher
    that owns ``echo`` (the model those tests count batches of)."""
    routers: list[str]
    batchers: list[str]
    batcher_metrics: dict[str, str]
    ingress: str
    """The HTTP doors of every router behind nginx, as an ingress serves them (http://...)."""
    router_metrics: list[str]
    quota_redis: str
    """The Redis (database) the routers count quotas and keep request ids in."""
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def target(self) -> str:
        """A gRPC target naming every router (pick_first fails over between them), the way a
        client reaches a Kubernetes Service's pods."""
        return "ipv4:" + ",".join(self.routers)

    def owner(self, model: str) -> str:
        """Role name of the batcher the routers send ``model`` to."""
        return f"batcher-{self.batchers.index(rendezvous(self.batchers, model)[0])}"

    def kill(self, role: str) -> None:
        """kill -9, as the OOM killer or a lost machine would."""
        proc = self.procs[role]
        proc.kill()
        proc.wait(STOP_S)


def ports(count: int) -> list[str]:
    return [f"127.0.0.1:{free_port()}" for _ in range(count)]


def _environment(root: Path, registry_url: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        FERRYMAN_DATA_DIR=str(root),
        FERRYMAN_DATABASE_URL=registry_url,
        FERRYMAN_REGISTRY_REFRESH_S=str(REGISTRY_REFRESH_S),
        FERRYMAN_NODE_HEARTBEAT_INTERVAL_S=str(HEARTBEAT_S),
        FERRYMAN_NODE_PLACEMENT_REFRESH_S=str(HEARTBEAT_S),
        FERRYMAN_NODE_TORCH_THREADS="1",
        # Spans nobody collects cost the CPU the test's load needs.
        FERRYMAN_TRACE_ENABLED="false",
        FERRYMAN_LOG_LEVEL="WARNING",
    )
    return env


def _start(
    stack: ExitStack, topology: Topology, role: str, args: list[str], env: dict[str, str], log: Path
) -> None:
    out = stack.enter_context(log.open("wb"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "ferryman_server.cli", "serve", *args],
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
    )
    topology.procs[role] = proc


def _stop_all(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM to all at once (each drains in parallel), SIGKILL to what outlives STOP_S."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(STOP_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_S)


def _wait_serving(topology: Topology, roles: dict[str, str]) -> None:
    deadline = time.monotonic() + START_S
    for role, address in roles.items():
        while not is_serving(address):
            proc = topology.procs[role]
            assert proc.poll() is None, f"{role} exited with {proc.returncode}"
            assert time.monotonic() < deadline, f"{role} not serving on {address}"
            time.sleep(POLL_S)


NGINX = """
worker_processes 1;
daemon off;
pid {root}/nginx.pid;
error_log {root}/nginx-error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log {root}/nginx-access.log;
    client_body_temp_path {root}/nginx-body;
    proxy_temp_path {root}/nginx-proxy;
    fastcgi_temp_path {root}/nginx-fastcgi;
    uwsgi_temp_path {root}/nginx-uwsgi;
    scgi_temp_path {root}/nginx-scgi;
    upstream routers {{
{servers}
        keepalive 16;
    }}
    server {{
        listen {listen};
        client_max_body_size 64m;
        location / {{
            proxy_pass http://routers;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Proto $scheme;
            # Server-sent events pass through as they are written.
            proxy_buffering off;
            proxy_read_timeout 300s;
        }}
    }}
}}
"""
"""An ingress as a cluster would have one: round-robin over the routers' HTTP doors,
keep-alive upstream connections, the client's address in X-Forwarded-For."""


def start_nginx(stack: ExitStack, root: Path, listen: str, upstreams: list[str]) -> subprocess.Popen[bytes]:
    """nginx (Debian's) on ``listen`` in front of ``upstreams`` (HTTP ``host:port``s), its
    files under ``root``; stop it by PID."""
    binary = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if binary is None:
        unavailable("nginx is not installed (Debian's nginx package; .ci/run installs it)")
    servers = "\n".join(f"        server {a};" for a in upstreams)
    config = root / "nginx.conf"
    config.write_text(NGINX.format(root=root, servers=servers, listen=listen))
    log = stack.enter_context((root / "nginx.log").open("wb"))
    return subprocess.Popen(
        [binary, "-c", str(config), "-p", str(root)], stdout=log, stderr=subprocess.STDOUT
    )


def _wait_http(topology: Topology, url: str) -> None:
    deadline = time.monotonic() + START_S
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        proc = topology.procs["ingress"]
        assert proc.poll() is None, f"nginx exited with {proc.returncode}"
        assert time.monotonic() < deadline, f"nothing answers {url}"
        time.sleep(POLL_S)


@contextmanager
def run_topology(root: Path, registry_url: str, redis_url: str) -> Iterator[Topology]:
    """The seeded platform of the end-to-end suite as separate processes; all stopped on exit."""
    engine = make_engine(registry_url)
    upgrade(engine)
    writer = RegistryWriter(engine, actor="test")
    keys = seed(writer, root / "artifacts")
    env = _environment(root, registry_url)
    with ExitStack() as stack:
        stack.callback(engine.dispose)
        batchers, batcher_metrics = ports(BATCHERS), ports(BATCHERS)
        routers, router_metrics, router_http = ports(ROUTERS), ports(ROUTERS), ports(ROUTERS)
        ingress = f"127.0.0.1:{free_port()}"
        node_listen, node_metrics = ports(len(NODES)), ports(len(NODES))
        (quota,), (quota_metrics,) = ports(1), ports(1)
        topology = Topology(
            e2e=E2E(
                router=routers[0],
                batcher=batchers[0],
                batcher_metrics="",
                router_metrics=f"http://{router_metrics[0]}/metrics",
                registry_url=registry_url,
                common=CommonSettings(data_dir=root, database_url=registry_url),
                keys=keys,
                writer=writer,
                node_metrics=[f"http://{a}/metrics" for a in node_metrics],
                http=f"http://{router_http[0]}",
            ),
            routers=routers,
            batchers=batchers,
            batcher_metrics={
                a: f"http://{m}/metrics" for a, m in zip(batchers, batcher_metrics, strict=True)
            },
            ingress=f"http://{ingress}",
            router_metrics=[f"http://{m}/metrics" for m in router_metrics],
            quota_redis=redis_url,
        )
        stack.callback(lambda: _stop_all(list(topology.procs.values())))
        topology.e2e.batcher_metrics = topology.batcher_metrics[rendezvous(batchers, "echo")[0]]
        for name, listen, metrics in zip(NODES, node_listen, node_metrics, strict=True):
            args = ["node", "--name", name, "--listen", listen, "--metrics-listen", metrics]
            _start(stack, topology, name, args, env, root / f"{name}.log")
        for i, (listen, metrics) in enumerate(zip(batchers, batcher_metrics, strict=True)):
            args = ["batcher", "--listen", listen, "--metrics-listen", metrics]
            _start(stack, topology, f"batcher-{i}", args, env, root / f"batcher-{i}.log")
        args = ["quota", "--listen", quota, "--redis-url", redis_url, "--metrics-listen", quota_metrics]
        _start(stack, topology, "quota", args, env, root / "quota.log")
        for i, (listen, metrics, http) in enumerate(zip(routers, router_metrics, router_http, strict=True)):
            args = ["router", "--listen", listen, "--batchers", ",".join(batchers)]
            args += ["--quota-address", quota, "--metrics-listen", metrics, "--http-listen", http]
            _start(stack, topology, f"router-{i}", args, env, root / f"router-{i}.log")
        every = {
            "quota": quota,
            **dict(zip(NODES, node_listen, strict=True)),
            **{f"batcher-{i}": a for i, a in enumerate(batchers)},
            **{f"router-{i}": a for i, a in enumerate(routers)},
        }
        topology.procs["ingress"] = start_nginx(stack, root, ingress, router_http)
        _wait_serving(topology, every)
        _wait_http(topology, f"http://{ingress}/v2/health/live")
        reader = RegistryReader(engine)
        wait_for_replicas(reader, ("rn1",), {"minilm:1", *(f"{EMBED}:{v}" for v in EMBED_VERSIONS)})
        wait_for_replicas(reader, NODES, {"mlp:1", "mlp:2", "echo:1", "echo:slow"})
        wait_known(routers, keys["acme"], START_S)
        yield topology
