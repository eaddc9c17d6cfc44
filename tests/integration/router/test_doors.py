"""One suite over every front door (ferryman.v1, OIP gRPC, OIP REST JSON and binary,
OpenAI): the same answers, quotas, idempotency, sticky routing, coalescing, trace context,
metrics and refusals, whichever door a request comes through."""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from doors import DOOR_NAMES, Answer, Door, Native, Outcome, Refusal, every_door
from metrics_scrape import sample, scrape
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from router_platform import E2E, EMBED, EMBED_VERSIONS

from ferryman_server.gpu_node.demo import echo
from ferryman_server.registry.specs import QuotaLimits

TEXTS = ["a rose is a rose", "is a rose"]
PROTOCOL = {
    "ferryman": "ferryman",
    "oip-grpc": "oip-grpc",
    "oip-rest-json": "oip-rest",
    "oip-rest-binary": "oip-rest",
    "openai": "openai",
}
SPAN_NAME = {
    "ferryman": "ferryman.v1.Inference/Predict",
    "oip-grpc": "inference.GRPCInferenceService/ModelInfer",
    "oip-rest-json": "POST /v2/models/{model}/infer",
    "oip-rest-binary": "POST /v2/models/{model}/infer",
    "openai": "POST /v1/embeddings",
}
"""The root span's name by the conventions: RPC service/method, or HTTP method and route."""
TENSOR_DOORS = [name for name in DOOR_NAMES if name != "openai"]
SPAN_WAIT_S = 5.0
USERS = 24


@pytest.fixture(params=DOOR_NAMES)
def door(request: pytest.FixtureRequest, e2e: E2E) -> Door:
    return {d.name: d for d in every_door(e2e.router, e2e.http)}[request.param]


@pytest.fixture(params=TENSOR_DOORS)
def tensor_door(request: pytest.FixtureRequest, e2e: E2E) -> Door:
    return {d.name: d for d in every_door(e2e.router, e2e.http)}[request.param]


def answered(outcome: Outcome) -> Answer:
    assert isinstance(outcome, Answer), f"refused: {outcome}"
    return outcome


def refused(outcome: Outcome) -> Refusal:
    assert isinstance(outcome, Refusal), "answered where a refusal was due"
    return outcome


def test_every_door_gives_the_native_answer(door: Door, e2e: E2E) -> None:
    key = e2e.keys["acme"]
    before = sample(e2e.router_metrics, "ferryman_requests_total", **labels(door, EMBED))
    native = answered(Native(e2e.router).predict(key, EMBED, {"text": TEXTS}, user="same-user"))
    got = answered(door.predict(key, EMBED, {"text": TEXTS}, user="same-user"))
    assert got.version == native.version, "the same user lands on the same version through every door"
    np.testing.assert_allclose(got.outputs["embedding"], native.outputs["embedding"], rtol=1e-5, atol=1e-6)
    assert got.outputs["embedding"].shape == (2, 384)
    after = sample(e2e.router_metrics, "ferryman_requests_total", **labels(door, EMBED, native.version))
    assert after >= before + 1, "requests are counted under the door's protocol"
    if door.tensors:
        x = np.random.default_rng(3).standard_normal((3, 512), dtype=np.float32)
        want = answered(Native(e2e.router).predict(key, "mlp", {"input": x}, version="1"))
        mlp = answered(door.predict(key, "mlp", {"input": x}, version="1"))
        assert mlp.version == "1"
        np.testing.assert_allclose(mlp.outputs["output"], want.outputs["output"], rtol=1e-5, atol=1e-6)


def labels(door: Door, model: str, version: str = "") -> dict[str, str]:
    found = {"tenant": "acme", "model": model, "code": "OK", "protocol": PROTOCOL[door.name]}
    return {**found, "version": version} if version else found


def test_hard_quota_and_idempotency_through_every_door(door: Door, e2e: E2E) -> None:
    key = e2e.new_tenant(f"q-{door.name}", QuotaLimits(rpm=3))
    first = answered(door.predict(key, EMBED, {"text": TEXTS}, request_id="r1"))
    again = answered(door.predict(key, EMBED, {"text": TEXTS}, request_id="r1"))
    assert again.request_id == first.request_id == "r1", "a retry under the same id is the same request"
    np.testing.assert_array_equal(again.outputs["embedding"], first.outputs["embedding"])
    answered(door.predict(key, EMBED, {"text": TEXTS}, request_id="r2"))
    over = refused(door.predict(key, EMBED, {"text": TEXTS}, request_id="r3"))
    # The answered retry of r1 counts against the rate as replays do (r1 ran once).
    assert over.code == "RESOURCE_EXHAUSTED", "r3 is the fourth request against rpm 3"
    assert over.retry_after_s is not None and over.retry_after_s > 0


def test_sticky_user_routing_is_the_same_through_every_door(door: Door, e2e: E2E) -> None:
    key = e2e.keys["acme"]
    native = Native(e2e.router)
    seen = set()
    for i in range(USERS):
        user = f"user-{i}"
        want = answered(native.predict(key, EMBED, {"text": ["hi"]}, user=user)).version
        assert answered(door.predict(key, EMBED, {"text": ["hi"]}, user=user)).version == want
        seen.add(want)
    assert seen == set(EMBED_VERSIONS), "both versions of the 50/50 route serve some users"


def test_identical_requests_coalesce_through_every_tensor_door(tensor_door: Door, e2e: E2E) -> None:
    x = np.full((1, echo.WIDTH), 7.0, np.float32)
    parameters = {"delay_ms": "200", "case": uuid.uuid4().hex}
    with ThreadPoolExecutor(6) as pool:
        outcomes = list(
            pool.map(
                lambda _: tensor_door.predict(e2e.keys["acme"], "echo", {"input": x}, parameters=parameters),
                range(6),
            )
        )
    answers = [answered(o) for o in outcomes]
    assert all(np.array_equal(a.outputs["output"], x * 2) for a in answers)
    assert any(a.coalesced for a in answers), "identical in-flight requests share one execution"


def test_trace_context_follows_every_door(door: Door, e2e: E2E, spans: InMemorySpanExporter) -> None:
    trace_id = uuid.uuid4().hex
    parent = f"00-{trace_id}-{uuid.uuid4().hex[:16]}-01"
    answered(door.predict(e2e.keys["acme"], EMBED, {"text": ["traced"]}, traceparent=parent))
    deadline = time.monotonic() + SPAN_WAIT_S
    while True:
        roots = [
            s
            for s in spans.get_finished_spans()
            if s.name == SPAN_NAME[door.name] and s.context.trace_id == int(trace_id, 16)
        ]
        if roots or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert len(roots) == 1, "the request's root span joins the caller's trace"
    assert dict(roots[0].attributes or {})["ferryman.protocol"] == PROTOCOL[door.name]


def test_refusals_keep_their_codes_through_every_door(door: Door, e2e: E2E) -> None:
    key = e2e.keys["acme"]
    protocol = PROTOCOL[door.name]
    auth_before = sample(e2e.router_metrics, "ferryman_auth_failures_total", protocol=protocol)
    assert refused(door.predict("fm_not-a-key", EMBED, {"text": TEXTS})).code == "UNAUTHENTICATED"
    assert sample(e2e.router_metrics, "ferryman_auth_failures_total", protocol=protocol) == auth_before + 1
    made_up = f"no-such-model-{uuid.uuid4().hex[:8]}"
    assert refused(door.predict(key, made_up, {"text": TEXTS})).code == "NOT_FOUND"
    series = scrape(e2e.router_metrics)
    assert not [ls for (_, ls) in series if ("model", made_up) in ls], "a made-up name is no label"
    assert any(("model", "-") in labels and ("code", "NOT_FOUND") in labels for (_, labels) in series)
    # A private model of another tenant answers exactly like an unknown one.
    assert refused(door.predict(key, "secret", {"text": TEXTS})).code == "NOT_FOUND"
    assert refused(door.predict(key, EMBED, {"text": ["x" * 5000]})).code == "INVALID_ARGUMENT"
    if door.tensors:
        bad = np.zeros((1, 3), np.float32)
        assert refused(door.predict(key, "mlp", {"input": bad})).code == "INVALID_ARGUMENT"
