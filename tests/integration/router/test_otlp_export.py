"""Traces and metrics as an OTLP collector receives them from a multi-process platform
(router, batcher and node each exporting over OTLP/gRPC to a receiver in this test): span
names and attributes by the semantic conventions, the standard OTEL_* variables honoured,
the node's batch span a child of the batcher's dispatch span with the same batch id, and
the metrics the Prometheus endpoint serves pushed with the same numbers."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
import numpy as np
import pytest
from metrics_scrape import scrape, total
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

import ferryman
from bench.scenarios.platform import PlatformSpec
from bench.scenarios.platform import ferryman as platform
from ferryman_server.kernel.net import free_port

# Left out of make test-fast: a collector's export intervals.
pytestmark = pytest.mark.slow

EXPORT_WAIT_S = 20.0
FAST_EXPORT_MS = "100"


@dataclass(frozen=True)
class Received:
    service: str
    resource: dict[str, Any]
    name: str
    trace_id: bytes
    span_id: bytes
    parent: bytes
    attributes: dict[str, Any]
    status: int
    links: tuple[bytes, ...] = ()
    """Span ids of the spans it links to."""


def plain(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


@dataclass
class Collector(trace_service_pb2_grpc.TraceServiceServicer):
    spans: list[Received] = field(default_factory=list)

    def Export(
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: grpc.ServicerContext
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        for resource_spans in request.resource_spans:
            resource = {a.key: plain(a.value) for a in resource_spans.resource.attributes}
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    self.spans.append(
                        Received(
                            service=str(resource.get("service.name")),
                            resource=resource,
                            name=span.name,
                            trace_id=span.trace_id,
                            span_id=span.span_id,
                            parent=span.parent_span_id,
                            attributes={a.key: plain(a.value) for a in span.attributes},
                            status=span.status.code,
                            links=tuple(link.span_id for link in span.links),
                        )
                    )
        return trace_service_pb2.ExportTraceServiceResponse()

    def named(self, name: str, count: int = 1) -> list[Received]:
        deadline = time.monotonic() + EXPORT_WAIT_S
        while True:
            found = [s for s in self.spans if s.name == name]
            if len(found) >= count or time.monotonic() > deadline:
                return found
            time.sleep(0.1)


@dataclass
class MetricsCollector(metrics_service_pb2_grpc.MetricsServiceServicer):
    """The latest pushed value of each (service, metric, attributes) series."""

    latest: dict[tuple[str, str, tuple[tuple[str, Any], ...]], float] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)

    def Export(
        self, request: metrics_service_pb2.ExportMetricsServiceRequest, context: grpc.ServicerContext
    ) -> metrics_service_pb2.ExportMetricsServiceResponse:
        for resource_metrics in request.resource_metrics:
            resource = {a.key: plain(a.value) for a in resource_metrics.resource.attributes}
            service = str(resource.get("service.name"))
            for scope in resource_metrics.scope_metrics:
                for metric in scope.metrics:
                    kind = str(metric.WhichOneof("data"))
                    self.kinds[metric.name] = kind
                    for point in getattr(metric, kind).data_points:
                        attributes = tuple(sorted((a.key, plain(a.value)) for a in point.attributes))
                        value = point.count if kind == "histogram" else point.as_double
                        self.latest[(service, metric.name, attributes)] = value
        return metrics_service_pb2.ExportMetricsServiceResponse()

    def value(self, service: str, name: str, **attributes: str) -> float:
        """The sum over the series of ``name`` whose attributes include ``attributes``."""
        return sum(
            v
            for (s, n, a), v in list(self.latest.items())
            if s == service and n == name and attributes.items() <= dict(a).items()
        )


@dataclass(frozen=True)
class Collected:
    spans: Collector
    metrics: MetricsCollector
    running: Any
    router_metrics: str
    """The router's Prometheus endpoint, to compare the pushed numbers with."""


@pytest.fixture(scope="module")
def collected() -> Iterator[Collected]:
    # The batcher in its own process: its spans carry its own service name.
    yield from collecting(separate_batcher=True)


@pytest.fixture(scope="module")
def cohosted() -> Iterator[Collected]:
    """``ferryman up``'s topology: the batcher inside the router's process."""
    yield from collecting(separate_batcher=False)


def collecting(separate_batcher: bool) -> Iterator[Collected]:
    collector = Collector()
    metrics = MetricsCollector()
    server = grpc.server(futures.ThreadPoolExecutor(4), options=[("grpc.so_reuseport", 0)])
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(collector, server)
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(metrics, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    router_metrics = f"127.0.0.1:{free_port()}"
    env = {
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{port}",
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": f"http://127.0.0.1:{port}",
        "OTEL_METRICS_EXPORTER": "otlp",
        "FERRYMAN_ROUTER_METRICS_LISTEN": router_metrics,
        "OTEL_METRIC_EXPORT_INTERVAL": FAST_EXPORT_MS,
        "OTEL_EXPORTER_OTLP_INSECURE": "true",
        "OTEL_BSP_SCHEDULE_DELAY": FAST_EXPORT_MS,
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment.name=test",
        "FERRYMAN_BATCHER_MAX_INFLIGHT_PER_NODE": "1",
    }
    try:
        with platform(PlatformSpec(env=env, separate_batcher=separate_batcher)) as running:
            yield Collected(collector, metrics, running, f"http://{router_metrics}/metrics")
    finally:
        server.stop(grace=None)


def test_spans_arrive_named_and_attributed_by_the_conventions(collected: Collected) -> None:
    collector, running = collected.spans, collected.running
    parent_trace = "0af7651916cd43dd8448eb211c80319c"
    with ferryman.Client(running.address, running.key) as client:
        client.predict(
            "mlp",
            np.zeros((1, 512), np.float32),
            metadata=[("traceparent", f"00-{parent_trace}-b7ad6b7169203331-01")],
        )
        with pytest.raises(ferryman.InvalidInput):
            client.predict("mlp", np.zeros((1, 3), np.float32))
    body = json.dumps(
        {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 512], "data": [0.0] * 512}]}
    )
    request = urllib.request.Request(
        f"http://{running.http}/v2/models/mlp/infer",
        data=body.encode(),
        headers={"Authorization": f"Bearer {running.key}"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.status == 200

    roots = collector.named("ferryman.v1.Inference/Predict", 2)
    answered = [r for r in roots if r.trace_id.hex() == parent_trace]
    assert len(answered) == 1, "the request's root joins the caller's trace"
    root = answered[0]
    assert root.service == "ferryman-router"
    assert root.resource["deployment.environment.name"] == "test", "OTEL_RESOURCE_ATTRIBUTES is honoured"
    assert {
        k: root.attributes[k] for k in ("rpc.system", "rpc.service", "rpc.method", "rpc.grpc.status_code")
    } == {
        "rpc.system": "grpc",
        "rpc.service": "ferryman.v1.Inference",
        "rpc.method": "Predict",
        "rpc.grpc.status_code": 0,
    }
    assert root.attributes["server.port"] == int(running.address.rsplit(":", 1)[1])
    assert root.attributes["gen_ai.request.model"] == "mlp"
    refused = [
        r
        for r in roots
        if r.attributes.get("rpc.grpc.status_code") == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    ]
    assert refused and refused[0].status != 2, "a caller's bad input is no server error (status unset)"
    (http,) = collector.named("POST /v2/models/{model}/infer")
    assert http.attributes["http.route"] == "/v2/models/{model}/infer"
    assert http.attributes["http.response.status_code"] == 200

    dispatches = {s.span_id: s for s in collector.named("batcher.dispatch", 2)}
    batches = collector.named("node.batch", 2)
    children = [b for b in batches if b.parent in dispatches]
    assert children, "node.batch spans are children of batcher.dispatch spans"
    for batch in children:
        dispatch = dispatches[batch.parent]
        assert batch.trace_id == dispatch.trace_id
        assert batch.service == "ferryman-node" and dispatch.service == "ferryman-batcher"
        assert batch.attributes["ferryman.batch_id"] == dispatch.attributes["ferryman.batch_id"] != ""


def test_metrics_are_pushed_over_otlp_with_the_prometheus_numbers(collected: Collected) -> None:
    running, metrics = collected.running, collected.metrics
    with ferryman.Client(running.address, running.key) as client:
        for _ in range(3):
            client.predict("mlp", np.random.rand(1, 512).astype(np.float32))
    scraped = total(scrape(collected.router_metrics), "ferryman_requests_total", model="mlp", code="OK")
    assert scraped >= 3
    deadline = time.monotonic() + EXPORT_WAIT_S
    while metrics.value("ferryman-router", "ferryman_requests", model="mlp", code="OK") < scraped:
        assert time.monotonic() < deadline, "the router's request counter was not pushed"
        time.sleep(0.1)
    assert metrics.kinds["ferryman_requests"] == "sum", "a counter is a monotonic sum"
    assert metrics.kinds["ferryman_request_latency_seconds"] == "histogram"
    assert metrics.value("ferryman-router", "ferryman_request_latency_seconds", model="mlp") >= scraped
    for service in ("ferryman-batcher", "ferryman-node"):
        assert any(s == service for s, _, _ in list(metrics.latest)), f"{service} pushes its metrics too"
    assert metrics.value("ferryman-router", "process_resident_memory_bytes") > 0


CONCURRENT = 16
"""Requests sent at once, so that batches hold several of them."""


def test_traces_are_whole_on_ferryman_ups_topology(cohosted: Collected) -> None:
    """With the batcher inside the router's process: every request's span has its queue
    span, and each batch's dispatch span is a root linked to every request it ran (the
    node's batch span its child), never a child of whichever request woke the queue."""
    collector, running = cohosted.spans, cohosted.running
    with (
        ferryman.Client(running.address, running.key) as client,
        futures.ThreadPoolExecutor(CONCURRENT) as pool,
    ):
        rows = [np.full((1, 512), float(i), np.float32) for i in range(CONCURRENT)]
        list(pool.map(lambda x: client.predict("mlp", x), rows))
    roots = {r.span_id: r for r in collector.named("ferryman.v1.Inference/Predict", CONCURRENT)}
    queues = collector.named("batcher.queue", CONCURRENT)
    assert {q.parent for q in queues} >= set(roots), "every request records its wait in the queue"
    # Spans come in export batches from two processes: wait until every request's dispatch
    # and every dispatch's node batch have arrived (however loaded the machine), then judge
    # them. (Waiting only for the dispatches once ended the wait before the node's first
    # export, with no node.batch span to judge.)
    deadline = time.monotonic() + EXPORT_WAIT_S
    while True:
        dispatches = {s.span_id: s for s in collector.spans if s.name == "batcher.dispatch"}
        batches = [s for s in collector.spans if s.name == "node.batch"]
        linked = {link for d in dispatches.values() for link in d.links}
        if (
            linked >= set(roots)
            and {b.parent for b in batches} >= set(dispatches)
            and all(b.parent in dispatches for b in batches)
        ) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert dispatches and batches
    assert all(d.parent == b"" for d in dispatches.values()), "a batch belongs to no one request"
    assert {link for d in dispatches.values() for link in d.links} >= set(roots), "linked to each request"
    assert all(b.parent in dispatches for b in batches if b.parent), "node.batch is a dispatch's child"
    assert not [b for b in batches if b.parent in roots], "no batch is an unrelated request's child"
