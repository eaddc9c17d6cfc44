"""A generative platform for end-to-end tests: registry, one node serving SmolLM2 with a
few generation slots, a batcher, and routers (memory quotas, or Redis for two)."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from batcher_platform import REGISTRY_REFRESH_S, register, wait_for_replicas
from harness import ServiceThread
from node_helpers import node_settings
from router_platform import wait_known

from ferryman_server.batcher.server import serve_batcher
from ferryman_server.batcher.settings import BatcherSettings
from ferryman_server.gpu_node.demo import smollm2
from ferryman_server.gpu_node.server import serve_node
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

MODEL = "smollm2"
SLOTS = 4
MAX_LEN = 1024
PRICE_PER_1K_TOKENS = 0.01


@dataclass
class GenPlatform:
    router: str
    router_metrics: str
    node_metrics: str
    batcher: str
    http: str
    common: CommonSettings
    writer: RegistryWriter
    threads: list[ServiceThread] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)
    """Tenant names by key."""

    def start_router(self, quota: QuotaSettings) -> str:
        """Another router on the platform (quotas on Redis for several)."""
        settings = RouterSettings(listen="127.0.0.1:0", batchers=self.batcher, quota_timeout_s=5.0)
        thread = ServiceThread(
            lambda stop, ready: serve_router(settings, CoHostedQuota(quota), self.common, stop, ready),
            "router",
        )
        address = thread.start()
        self.threads.append(thread)
        return address

    def tenant(self, limits: QuotaLimits | None = None, routers: tuple[str, ...] = ()) -> str:
        """A fresh tenant's key (its name is ``self.names[key]``), once the routers know it
        and its limits."""
        name = f"gen-{uuid.uuid4().hex[:6]}"
        key = self.writer.create_tenant(name).plaintext
        self.names[key] = name
        if limits is not None:
            self.writer.set_quota(name, limits)
        wait_known([self.router, *routers], key)
        time.sleep(REGISTRY_REFRESH_S * 3)  # the quota policy: a later write, a later refresh
        return key


@pytest.fixture(scope="session")
def gen(smollm2_artifact: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GenPlatform]:
    root = tmp_path_factory.mktemp("generation")
    url = f"sqlite:///{root / 'registry.db'}"
    engine = make_engine(url)
    upgrade(engine)
    writer = RegistryWriter(engine, actor="test")
    register(
        writer,
        MODEL,
        "1",
        smollm2_artifact,
        "causal_lm",
        smollm2.SCHEMA,
        max_batch=1,
        price_per_1k_tokens=PRICE_PER_1K_TOKENS,
    )
    writer.set_route(MODEL, {"1": 100})
    common = CommonSettings(data_dir=root, database_url=url, registry_refresh_s=REGISTRY_REFRESH_S)
    node_metrics = f"127.0.0.1:{free_port()}"
    settings = node_settings(
        name="gn1",
        use_registry=True,
        heartbeat_interval_s=0.2,
        torch_threads=1,
        generation_slots=SLOTS,
        generation_max_len=MAX_LEN,
        metrics_listen=node_metrics,
    )
    node = ServiceThread(lambda stop, ready: serve_node(settings, common, stop, ready), "gn1")
    node.start()
    wait_for_replicas(RegistryReader(engine), ("gn1",), {f"{MODEL}:1"})
    batcher_settings = BatcherSettings(listen="127.0.0.1:0")
    batcher = ServiceThread(
        lambda stop, ready: serve_batcher(batcher_settings, common, stop, ready), "batcher"
    )
    batcher_address = batcher.start()
    router_metrics = f"127.0.0.1:{free_port()}"
    http = f"127.0.0.1:{free_port()}"
    router_settings = RouterSettings(
        listen="127.0.0.1:0",
        batchers=batcher_address,
        metrics_listen=router_metrics,
        http_listen=http,
    )
    router = ServiceThread(
        lambda stop, ready: serve_router(
            router_settings, CoHostedQuota(QuotaSettings()), common, stop, ready
        ),
        "router",
    )
    platform = GenPlatform(
        router=router.start(),
        router_metrics=f"http://{router_metrics}/metrics",
        node_metrics=f"http://{node_metrics}/metrics",
        batcher=batcher_address,
        http=f"http://{http}",
        common=common,
        writer=writer,
        threads=[node, batcher, router],
    )
    try:
        yield platform
    finally:
        for thread in reversed(platform.threads):
            thread.stop()
        engine.dispose()


def curl(gen: GenPlatform, key: str, path: str, body: Mapping[str, object]) -> tuple[int, str]:
    """POST ``body`` as JSON to the platform's HTTP door with curl: the status and the body."""
    done = subprocess.run(
        [
            "curl",
            "-sS",
            "-o",
            "-",
            "-w",
            "\n%{http_code}",
            "-H",
            f"Authorization: Bearer {key}",
            "-H",
            "Content-Type: application/json",
            "-d",
            json.dumps(body),
            f"{gen.http}{path}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    text, _, status = done.stdout.rpartition("\n")
    return int(status), text
