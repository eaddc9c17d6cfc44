"""One end-to-end platform per test session, and the spans its services record."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest
from harness import ServiceThread
from job_helpers import JOB_CHARGE_EVERY_S, JOBS_REDIS_DB, Jobs
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from rollout_helpers import CHECK_S
from router_platform import E2E, run_e2e
from services import create_postgres_database, drop_postgres_database
from topology import Topology, run_topology

from ferryman_server.kernel.config import CommonSettings
from ferryman_server.kernel.net import free_port
from ferryman_server.quota.cohost import CoHostedQuota
from ferryman_server.quota.settings import QuotaSettings
from ferryman_server.registry.reader import RegistryReader
from ferryman_server.rollouts.server import serve_rollouts
from ferryman_server.rollouts.settings import RolloutSettings
from ferryman_server.router.server import serve_router
from ferryman_server.router.settings import RouterSettings

TOPOLOGY_REDIS_DB = 3
"""The topology's routers count quotas in a Redis database of their own: its tenants have
the same names as the in-process platform's."""


@pytest.fixture(scope="session")
def in_process_e2e(tmp_path_factory: pytest.TempPathFactory) -> Iterator[E2E]:
    """The services in threads of this process."""
    with run_e2e(tmp_path_factory.mktemp("e2e")) as platform:
        yield platform


@pytest.fixture(scope="session")
def e2e(in_process_e2e: E2E) -> E2E:
    """The platform a test runs on (a module may run its tests on the topology too)."""
    return in_process_e2e


@pytest.fixture(scope="module")
def topology(
    tmp_path_factory: pytest.TempPathFactory, postgres_admin_url: str, redis_url: str
) -> Iterator[Topology]:
    """The same platform as separate processes from the CLI, for the module that asks."""
    registry_url = create_postgres_database(postgres_admin_url)
    quotas = redis_url.rsplit("/", 1)[0] + f"/{TOPOLOGY_REDIS_DB}"
    try:
        with run_topology(tmp_path_factory.mktemp("topology"), registry_url, quotas) as running:
            yield running
    finally:
        drop_postgres_database(postgres_admin_url, registry_url)


class ListeningExporter(InMemorySpanExporter):
    """Keeps spans only while a test listens (``spans``): kept for the whole session, every
    later test's spans would pile up in this process (hundreds of MB, and garbage
    collections long enough to stall the in-process platform for a second)."""

    listening = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return super().export(spans) if self.listening else SpanExportResult.SUCCESS


@pytest.fixture(scope="session")
def span_exporter(e2e: E2E) -> ListeningExporter:
    """One in-memory exporter on the services' provider for the whole session: the SDK has
    no way to remove a processor, and a shut-down one warns on every later span."""
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider), "the services install an SDK tracer provider"
    exporter = ListeningExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


@pytest.fixture
def spans(span_exporter: ListeningExporter) -> Iterator[InMemorySpanExporter]:
    """The spans finished during one test."""
    span_exporter.clear()
    span_exporter.listening = True
    yield span_exporter
    span_exporter.listening = False
    span_exporter.clear()


@pytest.fixture(scope="session")
def rollout_controller(e2e: E2E) -> Iterator[RegistryReader]:
    """A rollout controller on the platform, reading the router's metrics; yields a reader."""
    settings = RolloutSettings(listen="127.0.0.1:0", router_metrics=[e2e.router_metrics], check_s=CHECK_S)
    thread = ServiceThread(lambda stop, ready: serve_rollouts(settings, e2e.common, stop, ready), "rollouts")
    thread.start()
    try:
        yield RegistryReader(e2e.writer._engine)
    finally:
        thread.stop()


def jobs_router(e2e: E2E, common: CommonSettings, name: str, redis: str) -> Iterator[Jobs]:
    """A router on the platform that serves durable jobs (and OpenAI batches on HTTP)."""
    http = f"127.0.0.1:{free_port()}"
    settings = RouterSettings(
        listen="127.0.0.1:0", http_listen=http, batchers=e2e.batcher, job_charge_every_s=JOB_CHARGE_EVERY_S
    )
    thread = ServiceThread(
        lambda stop, ready: serve_router(settings, CoHostedQuota(QuotaSettings()), common, stop, ready), name
    )
    router = thread.start()
    try:
        yield Jobs(e2e, redis, router, f"http://{http}")
    finally:
        thread.stop()


@pytest.fixture(scope="module")
def jobs(e2e: E2E, redis_url: str) -> Iterator[Jobs]:
    """Jobs in Redis."""
    url = redis_url.rsplit("/", 1)[0] + f"/{JOBS_REDIS_DB}"
    yield from jobs_router(e2e, e2e.common.model_copy(update={"jobs_redis_url": url}), "jobs", url)


@pytest.fixture(scope="module")
def registry_jobs(e2e: E2E) -> Iterator[Jobs]:
    """Jobs in the registry database (no Redis), as ``ferryman up``'s."""
    yield from jobs_router(e2e, e2e.common.model_copy(update={"jobs_in_registry": True}), "registry-jobs", "")
