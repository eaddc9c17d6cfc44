"""Traces across every hop: one trace per request with router, quota and queue spans,
and the node's batch span linked to every request span in the batch."""

from __future__ import annotations

import time
import uuid

import grpc
import numpy as np
import pytest
from batcher_client import item, submit_all
from metrics_scrape import exemplars
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from router_platform import E2E

from ferryman.tensors import encode
from ferryman.v1 import common_pb2, inference_pb2, inference_pb2_grpc
from ferryman_server.gpu_node.demo import echo
from ferryman_server.kernel.telemetry import traceparent
from ferryman_server.registry.specs import QuotaLimits

SPAN_WAIT_S = 5.0


def attrs(span: ReadableSpan) -> dict[str, object]:
    return dict(span.attributes or {})


def finished(exporter: InMemorySpanExporter, name: str, count: int) -> list[ReadableSpan]:
    deadline = time.monotonic() + SPAN_WAIT_S
    while True:
        found = [s for s in exporter.get_finished_spans() if s.name == name]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


def test_one_trace_per_request_across_router_quota_queue_and_node(
    e2e: E2E, spans: InMemorySpanExporter
) -> None:
    stub = inference_pb2_grpc.InferenceStub(grpc.insecure_channel(e2e.router))
    x = encode(np.ones((1, echo.WIDTH), np.float32))

    def predict(request_id: str, key: str) -> str:
        request = inference_pb2.PredictRequest(
            request_id=request_id, model="echo", inputs=[common_pb2.NamedTensor(name="input", tensor=x)]
        )
        answer: inference_pb2.PredictResponse = stub.Predict(
            request, metadata=(("authorization", f"Bearer {key}"),), timeout=30
        )
        return answer.request_id

    # A tenant with a quota: its requests reserve (a tenant no limit applies to is not
    # even asked about when the router names the request, below).
    key = e2e.new_tenant("traced", QuotaLimits(rpm=10_000))
    request_ids = [f"trace-{uuid.uuid4().hex[:8]}" for _ in range(3)]
    for request_id in request_ids:
        predict(request_id, key)
    roots = [
        s
        for s in finished(spans, "ferryman.v1.Inference/Predict", 3)
        if attrs(s).get("ferryman.request_id") in request_ids
    ]
    assert len(roots) == 3
    assert len({r.context.trace_id for r in roots}) == 3, "one trace per request"
    batches = finished(spans, "node.batch", 1)
    for root in roots:
        assert root.parent is None
        assert str(attrs(root)["ferryman.tenant"]).startswith("traced-")
        assert attrs(root)["ferryman.version"] == "1"
        # The RPC semantic conventions: system, service, method, server, status code.
        assert {
            k: attrs(root)[k] for k in ("rpc.system", "rpc.service", "rpc.method", "rpc.grpc.status_code")
        } == {
            "rpc.system": "grpc",
            "rpc.service": "ferryman.v1.Inference",
            "rpc.method": "Predict",
            "rpc.grpc.status_code": 0,
        }
        assert attrs(root)["server.address"] == "127.0.0.1" and int(str(attrs(root)["server.port"])) > 0
        assert attrs(root)["gen_ai.request.model"] == "echo"
        assert "gen_ai.usage.input_tokens" in attrs(root)
        in_trace = [s for s in spans.get_finished_spans() if s.context.trace_id == root.context.trace_id]
        children = {
            s.name for s in in_trace if s.parent is not None and s.parent.span_id == root.context.span_id
        }
        assert {"quota.reserve", "batcher.queue"} <= children
        linked = [b for b in batches if any(link.context.span_id == root.context.span_id for link in b.links)]
        assert len(linked) == 1, "the batch that ran the request links to its span"
    # No id of the client's (none to bind to an answer) and no limit: no quota call.
    unlimited = predict("", e2e.keys["acme"])
    (root,) = [
        s
        for s in finished(spans, "ferryman.v1.Inference/Predict", 4)
        if attrs(s).get("ferryman.request_id") == unlimited
    ]
    names = {s.name for s in spans.get_finished_spans() if s.context.trace_id == root.context.trace_id}
    assert "batcher.queue" in names and "quota.reserve" not in names


def test_a_batch_of_eight_has_eight_links(e2e: E2E, spans: InMemorySpanExporter) -> None:
    tracer = trace.get_tracer("test")
    case = uuid.uuid4().hex
    parents = [tracer.start_span(f"client-{i}") for i in range(8)]
    items = []
    for i, parent in enumerate(parents):
        submit = item(f"eight-{case}-{i}", np.full((1, echo.WIDTH), i, np.float32), parameters={"case": case})
        submit.traceparent = traceparent(parent)
        items.append(submit)
    results = submit_all(e2e.batcher, items, per_message=8)
    for parent in parents:
        parent.end()
    assert all(r.status.code == 0 for r in results.values())
    batches = [b for b in finished(spans, "node.batch", 1) if attrs(b).get("ferryman.items") == 8]
    assert batches, "the eight items ran as one batch"
    linked = {link.context.span_id for link in batches[0].links}
    assert linked == {p.get_span_context().span_id for p in parents}


def test_the_nodes_batch_span_is_a_child_of_the_dispatch_and_shares_its_batch_id(
    e2e: E2E, spans: InMemorySpanExporter
) -> None:
    case = uuid.uuid4().hex
    results = submit_all(
        e2e.batcher, [item(f"b-{case}", np.ones((1, echo.WIDTH), np.float32), parameters={"case": case})]
    )
    assert all(r.status.code == 0 for r in results.values())
    dispatches = [d for d in finished(spans, "batcher.dispatch", 1) if d.end_time]
    batches = finished(spans, "node.batch", 1)
    pairs = [
        (d, b)
        for d in dispatches
        for b in batches
        if b.parent is not None and b.parent.span_id == d.context.span_id
    ]
    assert pairs, "a node.batch span whose parent is a batcher.dispatch span"
    dispatch, batch = pairs[-1]
    assert batch.context.trace_id == dispatch.context.trace_id
    assert attrs(batch)["ferryman.batch_id"] == attrs(dispatch)["ferryman.batch_id"] != ""


def test_a_callers_mistake_is_no_server_error_in_its_span(e2e: E2E, spans: InMemorySpanExporter) -> None:
    stub = inference_pb2_grpc.InferenceStub(grpc.insecure_channel(e2e.router))
    request_id = f"bad-{uuid.uuid4().hex[:8]}"
    bad = inference_pb2.PredictRequest(
        request_id=request_id,
        model="echo",
        inputs=[common_pb2.NamedTensor(name="input", tensor=encode(np.ones((1, 3), np.float32)))],
    )
    with pytest.raises(grpc.RpcError):
        stub.Predict(bad, metadata=(("authorization", f"Bearer {e2e.keys['acme']}"),), timeout=30)
    deadline = time.monotonic() + SPAN_WAIT_S
    while True:
        found = [
            s
            for s in spans.get_finished_spans()
            if s.name == "ferryman.v1.Inference/Predict" and attrs(s).get("rpc.grpc.status_code") == 3
        ]
        if found or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert found, "the refused request's span"
    assert found[-1].status.status_code != StatusCode.ERROR, "INVALID_ARGUMENT is the caller's, not an error"


def test_latency_queue_and_batch_histograms_carry_exemplars_of_exported_traces(
    e2e: E2E, spans: InMemorySpanExporter
) -> None:
    """A point on a latency, queue-wait or batch-size chart leads to a trace that exists."""
    stub = inference_pb2_grpc.InferenceStub(grpc.insecure_channel(e2e.router))
    x = encode(np.ones((1, echo.WIDTH), np.float32))
    for _ in range(3):
        stub.Predict(
            inference_pb2.PredictRequest(
                model="echo", inputs=[common_pb2.NamedTensor(name="input", tensor=x)]
            ),
            metadata=(("authorization", f"Bearer {e2e.keys['acme']}"),),
            timeout=30,
        )
    finished(spans, "ferryman.v1.Inference/Predict", 3)
    exported = {f"{s.context.trace_id:032x}" for s in spans.get_finished_spans()}
    router = exemplars(e2e.router_metrics)
    batcher = exemplars(e2e.batcher_metrics)
    for family, found in (
        ("ferryman_request_latency_seconds_bucket", router),
        ("ferryman_queue_wait_seconds_bucket", batcher),
        ("ferryman_batch_size_bucket", batcher),
    ):
        assert found.get(family), f"{family}: no exemplar"
        assert found[family] & exported, f"{family}: exemplars name no exported trace"
