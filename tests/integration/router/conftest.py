"""One end-to-end platform per test session, and the spans its services record."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from router_platform import E2E, run_e2e


@pytest.fixture(scope="session")
def e2e(tmp_path_factory: pytest.TempPathFactory) -> Iterator[E2E]:
    with run_e2e(tmp_path_factory.mktemp("e2e")) as platform:
        yield platform


@pytest.fixture(scope="session")
def span_exporter(e2e: E2E) -> InMemorySpanExporter:
    """One in-memory exporter on the services' provider for the whole session: the SDK has
    no way to remove a processor, and a shut-down one warns on every later span."""
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider), "the services install an SDK tracer provider"
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


@pytest.fixture
def spans(span_exporter: InMemorySpanExporter) -> Iterator[InMemorySpanExporter]:
    """The spans finished during one test."""
    span_exporter.clear()
    yield span_exporter
    span_exporter.clear()
