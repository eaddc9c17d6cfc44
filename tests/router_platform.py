"""The whole platform for end-to-end tests: registry, two nodes, a batcher, routers."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from batcher_platform import REGISTRY_REFRESH_S, node_main, register, wait_for_replicas
from harness import ServiceThread

from ferryman.v1 import inference_pb2, inference_pb2_grpc
from ferryman_server.batcher.server import serve_batcher
from ferryman_server.batcher.settings import BatcherSettings
from ferryman_server.gpu_node.demo import echo, minilm, mlp
from ferryman_server.kernel.config import CommonSettings
from ferryman_server.kernel.net import free_port
from ferryman_server.quota.cohost import CoHostedQuota
from ferryman_server.quota.settings import QuotaSettings
from ferryman_server.registry.db import make_engine
from ferryman_server.registry.migrate import upgrade
from ferryman_server.registry.reader import RegistryReader
from ferryman_server.registry.specs import QuotaLimits
from ferryman_server.registry.writer import RegistryWriter
from ferryman_server.router.server import serve_router
from ferryman_server.router.settings import RouterSettings

NODES = ("rn1", "rn2")
ECHO_HANDLER = "ferryman_server.gpu_node.demo.echo:EchoHandler"
SLOW_MS = 300
MINILM_PRICE_PER_1K_TOKENS = 1.0
KEY_WAIT_S = 10.0
EMBED = "embed"
EMBED_VERSIONS = ("a", "b")
DEFAULT_QUOTA_TIMEOUT_S = RouterSettings.model_fields["quota_timeout_s"].default
DEFAULT_MAX_MESSAGE_BYTES = RouterSettings.model_fields["max_message_bytes"].default
DEFAULT_HTTP_MAX_CONNECTIONS = RouterSettings.model_fields["http_max_connections"].default


def wait_known(routers: list[str], key: str, timeout_s: float = KEY_WAIT_S) -> None:
    """Until every router's registry snapshot knows ``key``."""
    deadline = time.monotonic() + timeout_s
    metadata = [("authorization", f"Bearer {key}")]
    for router in routers:
        stub = inference_pb2_grpc.InferenceStub(grpc.insecure_channel(router))
        while True:
            try:
                stub.ListModels(inference_pb2.ListModelsRequest(), metadata=metadata, timeout=timeout_s)
                break
            except grpc.RpcError:
                assert time.monotonic() < deadline, f"router {router} never learnt the key"
                time.sleep(REGISTRY_REFRESH_S / 2)


@dataclass
class E2E:
    router: str
    batcher: str
    batcher_metrics: str
    router_metrics: str
    registry_url: str
    common: CommonSettings
    keys: dict[str, str]
    writer: RegistryWriter
    threads: list[ServiceThread] = field(default_factory=list)
    node_metrics: list[str] = field(default_factory=list)
    http: str = ""
    """Base URL of the first router's HTTP doors."""

    def start_router(
        self,
        quota: QuotaSettings,
        metrics_listen: str = "",
        internal_listen: str = "",
        quota_timeout_s: float = DEFAULT_QUOTA_TIMEOUT_S,
        http_listen: str = "",
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        listen: str = "127.0.0.1:0",
        http_max_connections: int = DEFAULT_HTTP_MAX_CONNECTIONS,
        common: CommonSettings | None = None,
        **extra: Any,
    ) -> tuple[str, ServiceThread]:
        """Another router on the same platform (for multi-router quota tests); ``extra``:
        more of its settings; ``common``: the platform's, changed."""
        settings = RouterSettings(
            **extra,
            quota_timeout_s=quota_timeout_s,
            listen=listen,
            http_max_connections=http_max_connections,
            http_listen=http_listen,
            max_message_bytes=max_message_bytes,
            batchers=self.batcher,
            metrics_listen=metrics_listen,
            internal_listen=internal_listen,
        )
        thread = ServiceThread(
            lambda stop, ready: serve_router(
                settings, CoHostedQuota(quota), common or self.common, stop, ready
            ),
            "router",
        )
        address = thread.start()
        self.threads.append(thread)
        return address, thread

    def new_tenant(self, prefix: str, limits: QuotaLimits | None = None) -> str:
        """A fresh tenant's key, once the first router's registry snapshot knows it."""
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        key = self.writer.create_tenant(name).plaintext
        if limits is not None:
            self.writer.set_quota(name, limits)
        wait_known([self.router], key)
        time.sleep(REGISTRY_REFRESH_S * 3)  # the quota policy: a later write, a later refresh
        return key


def seed(writer: RegistryWriter, fx: Path) -> dict[str, str]:
    """Versions, routes, placements and tenants of the end-to-end platform; returns API keys."""
    mlp_path = mlp.export_mlp(fx / "mlp.pt2")
    register(writer, "mlp", "1", mlp_path, "torch_export", mlp.SCHEMA, max_batch=64, delay_ms=5)
    register(writer, "mlp", "2", mlp_path, "torch_export", mlp.SCHEMA, max_batch=64, delay_ms=5)
    writer.set_route("mlp", {"1": 90, "2": 10}, sticky="user")
    minilm_path = minilm.build_artifact(fx / "minilm")
    for model, version in (("minilm", "1"), *((EMBED, v) for v in EMBED_VERSIONS)):
        register(
            writer,
            model,
            version,
            minilm_path,
            "python",
            minilm.SCHEMA,
            handler="ferryman_server.gpu_node.demo.minilm:MiniLMHandler",
            max_batch=16,
            nodes=("rn1",),
            price_per_1k_tokens=MINILM_PRICE_PER_1K_TOKENS,
        )
    writer.set_route("minilm", {"1": 100})
    # Two versions of one text model, sticky per user: routing through every front door.
    writer.set_route(EMBED, dict.fromkeys(EMBED_VERSIONS, 50), sticky="user")
    plain = echo.write_config(fx / "echo.json")
    register(
        writer, "echo", "1", plain, "python", echo.SCHEMA, handler=ECHO_HANDLER, max_batch=64, delay_ms=2
    )
    register(
        writer,
        "echo",
        "slow",
        echo.write_config(fx / "slow.json", delay_ms=SLOW_MS),
        "python",
        echo.SCHEMA,
        handler=ECHO_HANDLER,
        max_batch=4,
    )
    writer.set_route("echo", {"1": 100})
    # A model whose only version runs nowhere: its route falls back to echo.
    # Never servable (its artifact is not a handler's config, so a load on demand fails):
    # its route's fallback answers.
    missing = fx / "broken.json"
    missing.write_text("{")
    register(writer, "lonely", "1", missing, "python", echo.SCHEMA, handler=ECHO_HANDLER, nodes=())
    writer.set_route("lonely", {"1": 100}, fallback="echo")
    keys = {"acme": writer.create_tenant("acme").plaintext}
    keys["insider"] = writer.create_tenant("insider").plaintext
    # A private model only "insider" may use, set as the fallback of a public model that
    # runs nowhere: the allow-list must hold for fallbacks too.
    register(
        writer,
        "secret",
        "1",
        plain,
        "python",
        echo.SCHEMA,
        handler=ECHO_HANDLER,
        published=False,
        owners=("insider",),
    )
    writer.set_route("secret", {"1": 100})
    register(writer, "front", "1", missing, "python", echo.SCHEMA, handler=ECHO_HANDLER, nodes=())
    writer.set_route("front", {"1": 100}, fallback="secret")
    keys["limited"] = writer.create_tenant("limited", allowed_models=["echo"]).plaintext
    keys["metered"] = writer.create_tenant("metered").plaintext
    writer.set_quota("metered", QuotaLimits(rpm=5))
    return keys


@contextmanager
def run_e2e(root: Path, registry_url: str = "") -> Iterator[E2E]:
    """The platform on a registry at ``registry_url`` (default: SQLite under ``root``)."""
    url = registry_url or f"sqlite:///{root / 'registry.db'}"
    engine = make_engine(url)
    upgrade(engine)
    writer = RegistryWriter(engine, actor="test")
    keys = seed(writer, root / "artifacts")
    common = CommonSettings(data_dir=root, database_url=url, registry_refresh_s=REGISTRY_REFRESH_S)

    node_metrics = {name: f"127.0.0.1:{free_port()}" for name in NODES}
    threads = [ServiceThread(node_main(name, common, node_metrics[name]), name) for name in NODES]
    for thread in threads:
        thread.start()
    wait_for_replicas(
        RegistryReader(engine),
        ("rn1",),
        {"mlp:1", "mlp:2", "minilm:1", "echo:1", "echo:slow", *(f"{EMBED}:{v}" for v in EMBED_VERSIONS)},
    )
    wait_for_replicas(RegistryReader(engine), ("rn2",), {"mlp:1", "mlp:2", "echo:1", "echo:slow"})
    metrics = f"127.0.0.1:{free_port()}"
    batcher_settings = BatcherSettings(listen="127.0.0.1:0", metrics_listen=metrics)
    batcher = ServiceThread(
        lambda stop, ready: serve_batcher(batcher_settings, common, stop, ready), "batcher"
    )
    threads.append(batcher)
    batcher_address = batcher.start()
    time.sleep(0.3)  # the batcher's first replica refresh
    router_metrics = f"127.0.0.1:{free_port()}"
    platform = E2E(
        router="",
        batcher=batcher_address,
        batcher_metrics=f"http://{metrics}/metrics",
        router_metrics=f"http://{router_metrics}/metrics",
        registry_url=url,
        common=common,
        keys=keys,
        writer=writer,
        threads=threads,
        node_metrics=[f"http://{a}/metrics" for a in node_metrics.values()],
    )
    http = f"127.0.0.1:{free_port()}"
    platform.router, _ = platform.start_router(QuotaSettings(), router_metrics, http_listen=http)
    platform.http = f"http://{http}"
    try:
        yield platform
    finally:
        for thread in reversed(platform.threads):
            thread.stop()
        engine.dispose()
