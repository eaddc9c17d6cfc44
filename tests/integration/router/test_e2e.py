"""End to end over real gRPC: SDK and raw stubs -> router -> batcher -> nodes, on two
platforms: the services in this process, and the topology the Helm chart runs (2 routers,
2 batchers, 3 nodes, Redis, PostgreSQL as separate processes started from the CLI), which
ends with a kill -9 of one of each under load."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
import pytest
import torch
from figures import report
from metrics_scrape import sample
from router_platform import E2E, SLOW_MS
from sdk_load import SdkLoad
from topology import Topology

import ferryman
from ferryman.errors import unpack_details
from ferryman.tensors import decode, encode
from ferryman.v1 import common_pb2, inference_pb2, inference_pb2_grpc
from ferryman_server.gpu_node.demo import echo, mlp

# Left out of make test-fast: it also runs on the chart's topology of processes.
pytestmark = pytest.mark.slow

RNG = np.random.default_rng(11)
PLATFORMS = ("in-process", "topology")
LOAD_CLIENTS = 4
RECOVER_S = 30.0
SETTLE_S = 1.0
PAUSE_S = 0.01
PROPAGATION_GUARD_S = 60.0
"""A registry change (a key, a route) reaches the routers at their next config refresh
(every 0.5 s): this bound only stops a test that would otherwise wait forever, it does not
time the refresh (a loaded machine must not fail it)."""


@pytest.fixture(params=PLATFORMS)
def e2e(request: pytest.FixtureRequest) -> E2E:
    """Every test here runs on both platforms (looked up by name: a parametrised fixture
    that requested the session's ``e2e`` would set that one up again for each test)."""
    if request.param == "topology":
        topology: Topology = request.getfixturevalue("topology")
        return topology.e2e
    platform: E2E = request.getfixturevalue("in_process_e2e")
    return platform


def stub(e2e: E2E) -> inference_pb2_grpc.InferenceStub:
    return inference_pb2_grpc.InferenceStub(grpc.insecure_channel(e2e.router))


def auth(key: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {key}"),)


def mlp_request(x: np.ndarray, **kw: object) -> inference_pb2.PredictRequest:
    return inference_pb2.PredictRequest(
        model="mlp",
        inputs=[common_pb2.NamedTensor(name="input", tensor=encode(x))],
        **kw,  # type: ignore[arg-type]
    )


def rpc_error(call: object) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as raised:
        call()  # type: ignore[operator]
    return raised.value


def test_sdk_and_raw_stubs_get_correct_mlp_answers(e2e: E2E) -> None:
    x = RNG.standard_normal((3, 512), dtype=np.float32)
    expected = mlp.build_mlp()(torch.from_numpy(x)).detach().numpy()
    with ferryman.Client(e2e.router, e2e.keys["acme"]) as client:
        prediction = client.predict("mlp", x, user="alice")
    output = prediction.outputs["output"]
    assert isinstance(output, np.ndarray)
    np.testing.assert_allclose(output, expected, rtol=1e-4, atol=1e-5)
    assert prediction.model == "mlp" and prediction.version in ("1", "2") and not prediction.fallback
    assert prediction.usage.items == 3 and prediction.usage.cost_usd >= 0
    raw = stub(e2e).Predict(mlp_request(x), metadata=auth(e2e.keys["acme"]), timeout=30)
    np.testing.assert_allclose(decode(raw.outputs[0].tensor), expected, rtol=1e-4, atol=1e-5)
    assert raw.timing.batch_size >= 3 and raw.timing.total.ToNanoseconds() > 0


def test_sdk_accepts_lists_and_torch_tensors(e2e: E2E) -> None:
    row = RNG.standard_normal(512).astype(np.float32)
    with ferryman.Client(e2e.router, e2e.keys["acme"]) as client:
        from_list = np.asarray(client.predict("mlp", {"input": [row.tolist()]}).outputs["output"])
        from_torch = np.asarray(client.predict("mlp", torch.from_numpy(row)).outputs["output"])
    np.testing.assert_allclose(from_list, from_torch, rtol=1e-5, atol=1e-6)


def test_minilm_embeddings_through_the_platform(e2e: E2E) -> None:
    texts = ["a ferry on a river", "boats carry people over water"]
    with ferryman.Client(e2e.router, e2e.keys["acme"]) as client:
        prediction = client.predict("minilm", texts)
    embedding = prediction.outputs["embedding"]
    assert isinstance(embedding, np.ndarray) and embedding.shape == (2, 384)
    np.testing.assert_allclose(np.linalg.norm(embedding, axis=1), 1.0, rtol=1e-4)
    assert prediction.usage.input_tokens > 4
    from sentence_transformers import SentenceTransformer

    from ferryman_server.gpu_node.demo.minilm import bundled_model_dir

    reference = SentenceTransformer(str(bundled_model_dir()), device="cpu").encode(texts)
    cosine = (embedding * reference).sum(1) / np.linalg.norm(reference, axis=1)
    assert cosine.min() > 0.999


def test_bad_and_revoked_keys_are_unauthenticated(e2e: E2E) -> None:
    x = np.zeros((1, 512), np.float32)
    for metadata in ((), auth("fm_00000000_nope"), auth("garbage")):
        error = rpc_error(lambda m=metadata: stub(e2e).Predict(mlp_request(x), metadata=m, timeout=10))
        assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    key = e2e.writer.issue_key("acme")
    issued_at = time.monotonic()
    while True:  # a new key works once the routers' config refresh has seen it
        try:
            assert stub(e2e).Predict(mlp_request(x), metadata=auth(key.plaintext), timeout=30).outputs
            break
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.UNAUTHENTICATED
            assert time.monotonic() - issued_at < PROPAGATION_GUARD_S, "the new key never came to work"
            time.sleep(0.05)
    e2e.writer.revoke_key(key.prefix)
    revoked_at = time.monotonic()
    while True:
        try:
            stub(e2e).Predict(mlp_request(x), metadata=auth(key.plaintext), timeout=10)
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.UNAUTHENTICATED
            break
        time.sleep(0.05)
        assert time.monotonic() - revoked_at < PROPAGATION_GUARD_S, "the revoked key still works"
    with pytest.raises(ferryman.Unauthenticated), ferryman.Client(e2e.router, key.plaintext) as client:
        client.predict("mlp", x)


def test_unknown_model_wrong_shape_and_forbidden_model(e2e: E2E) -> None:
    x = np.zeros((1, 512), np.float32)
    missing = inference_pb2.PredictRequest(
        model="nope", inputs=[common_pb2.NamedTensor(name="input", tensor=encode(x))]
    )
    error = rpc_error(lambda: stub(e2e).Predict(missing, metadata=auth(e2e.keys["acme"]), timeout=10))
    assert error.code() == grpc.StatusCode.NOT_FOUND
    wrong = mlp_request(np.zeros((1, 100), np.float32))
    error = rpc_error(lambda: stub(e2e).Predict(wrong, metadata=auth(e2e.keys["acme"]), timeout=10))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    with (
        pytest.raises(ferryman.InvalidInput) as invalid,
        ferryman.Client(e2e.router, e2e.keys["acme"]) as client,
    ):
        client.predict("mlp", {"input": np.zeros((1, 100), np.float32)})
    assert invalid.value.violations == [("inputs.input.shape", "expected [rows, 512], got [1, 100]")]
    error = rpc_error(
        lambda: stub(e2e).Predict(mlp_request(x), metadata=auth(e2e.keys["limited"]), timeout=10)
    )
    # A model the tenant may not use answers exactly as one that does not exist.
    unknown = rpc_error(
        lambda: stub(e2e).Predict(
            inference_pb2.PredictRequest(model="no-such-model"),
            metadata=auth(e2e.keys["limited"]),
            timeout=10,
        )
    )
    assert error.code() == unknown.code() == grpc.StatusCode.NOT_FOUND
    assert str(error.details()).replace("mlp", "no-such-model") == unknown.details()


def test_canary_split_is_ten_percent_and_sticky_per_user(e2e: E2E) -> None:
    x = np.zeros((1, 512), np.float32)
    users = [f"user-{i}" for i in range(2000)]

    def served(batch: list[str]) -> dict[str, str]:
        requests = iter([mlp_request(x, user=u, request_id=f"{u}-{uuid.uuid4().hex[:6]}") for u in batch])
        by_request: dict[str, str] = {}
        for answer in stub(e2e).PredictStream(requests, metadata=auth(e2e.keys["acme"]), timeout=120):
            assert answer.WhichOneof("result") == "response", answer.error.message
            by_request[answer.request_id.rsplit("-", 1)[0]] = answer.response.version
        return by_request

    first = served(users)
    share = Counter(first.values())["2"] / len(users)
    assert 0.07 <= share <= 0.13, share
    again = served(users[:300])
    assert all(again[u] == first[u] for u in users[:300])


def test_route_without_replicas_answers_from_fallback(e2e: E2E) -> None:
    with ferryman.Client(e2e.router, e2e.keys["acme"]) as client:
        prediction = client.predict("lonely", np.ones((1, echo.WIDTH), np.float32))
    assert prediction.fallback and prediction.model == "echo" and prediction.version == "1"
    np.testing.assert_array_equal(prediction.outputs["output"], np.full((1, echo.WIDTH), 2.0, np.float32))


def test_late_request_is_dropped_without_running(e2e: E2E) -> None:
    before = sample(e2e.batcher_metrics, "ferryman_batch_size_count", model="echo", version="slow")
    request = inference_pb2.PredictRequest(
        model="echo",
        version="slow",
        inputs=[common_pb2.NamedTensor(name="input", tensor=encode(np.ones((1, echo.WIDTH), np.float32)))],
    )
    error = rpc_error(
        lambda: stub(e2e).Predict(request, metadata=auth(e2e.keys["acme"]), timeout=SLOW_MS / 3000)
    )
    assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    time.sleep(SLOW_MS / 1000)
    assert sample(e2e.batcher_metrics, "ferryman_batch_size_count", model="echo", version="slow") == before


def test_router_sheds_what_cannot_make_its_deadline(e2e: E2E) -> None:
    request = inference_pb2.PredictRequest(
        model="echo",
        version="slow",
        inputs=[common_pb2.NamedTensor(name="input", tensor=encode(np.ones((1, echo.WIDTH), np.float32)))],
    )
    metadata = auth(e2e.keys["acme"])
    # One slow answer teaches the router (and the batcher's predictor) that echo:slow takes SLOW_MS.
    stub(e2e).Predict(request, metadata=metadata, timeout=30)
    budget_s = SLOW_MS / 3000

    def refused_by_batcher() -> float:
        return sample(
            e2e.batcher_metrics,
            "ferryman_shed_requests_total",
            model="echo",
            version="slow",
            reason="overloaded",
        )

    def shed_by_router() -> float:
        return sample(e2e.router_metrics, "ferryman_router_shed_total", model="echo", version="slow")

    batcher_before, router_before = refused_by_batcher(), shed_by_router()
    for _ in range(2):
        # The first may go on as the router's probe and be refused by the batcher; the second
        # cannot: the router answers it itself, at once.
        error = rpc_error(lambda: stub(e2e).Predict(request, metadata=metadata, timeout=budget_s))
        assert error.code() in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED)
    from grpc_status import rpc_status

    details = unpack_details(rpc_status.from_call(error))  # type: ignore[arg-type]
    # The version never answered within this budget, idle or not: no wait would help, so the
    # refusal is DEADLINE_EXCEEDED (retrying is futile), not an overload's RESOURCE_EXHAUSTED.
    assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    # DEADLINE_TOO_SHORT from the shedder (slower than this budget even when idle), or
    # DEADLINE_UNMEETABLE from the door (slower than any answer yet: it may have waited).
    reason = details["ErrorInfo"].reason  # type: ignore[attr-defined]
    assert reason in ("DEADLINE_TOO_SHORT", "DEADLINE_UNMEETABLE"), error.details()
    assert "RetryInfo" not in details
    assert shed_by_router() >= router_before + 1, "the router answered without the batcher"
    assert refused_by_batcher() <= batcher_before + 1
    # A request whose budget fits the expected latency still goes through.
    assert stub(e2e).Predict(request, metadata=metadata, timeout=30).outputs


def test_a_deadline_shorter_than_any_answer_is_deadline_exceeded_not_overload(e2e: E2E) -> None:
    x = encode(np.ones((1, echo.WIDTH), np.float32))
    for _ in range(3):  # an idle platform's echo answers in a few milliseconds
        stub(e2e).Predict(
            inference_pb2.PredictRequest(
                model="echo", inputs=[common_pb2.NamedTensor(name="input", tensor=x)]
            ),
            metadata=auth(e2e.keys["acme"]),
            timeout=30,
        )
    for _ in range(3):
        hurried = inference_pb2.PredictRequest(
            model="echo", inputs=[common_pb2.NamedTensor(name="input", tensor=x)]
        )
        hurried.timeout.FromMicroseconds(1000)  # 1 ms: no platform state would make it
        with pytest.raises(grpc.RpcError) as raised:
            stub(e2e).Predict(hurried, metadata=auth(e2e.keys["acme"]), timeout=30)
        assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED, raised.value.details()


def test_each_request_in_a_stream_keeps_its_own_timeout(e2e: E2E) -> None:
    x = encode(np.ones((1, echo.WIDTH), np.float32))
    hurried = inference_pb2.PredictRequest(
        request_id="hurried",
        model="echo",
        version="slow",
        inputs=[common_pb2.NamedTensor(name="input", tensor=x)],
    )
    hurried.timeout.FromMilliseconds(SLOW_MS // 3)
    patient = inference_pb2.PredictRequest(
        request_id="patient",
        model="echo",
        version="slow",
        inputs=[common_pb2.NamedTensor(name="input", tensor=x)],
    )
    started = time.perf_counter()
    answers = {}
    for answer in stub(e2e).PredictStream(
        iter([hurried, patient]), metadata=auth(e2e.keys["acme"]), timeout=30
    ):
        answers[answer.request_id] = (answer, time.perf_counter() - started)
    late, late_s = answers["hurried"]
    assert late.WhichOneof("result") == "error"
    assert late.error.code in (
        grpc.StatusCode.DEADLINE_EXCEEDED.value[0],
        grpc.StatusCode.RESOURCE_EXHAUSTED.value[0],
    )
    # Answered by its own deadline: before the patient one, which the slow model answers.
    assert list(answers) == ["hurried", "patient"] and late_s <= answers["patient"][1]
    assert answers["patient"][0].WhichOneof("result") == "response"


def test_request_quota_is_enforced_with_retry_info(e2e: E2E) -> None:
    x = np.ones((1, echo.WIDTH), np.float32)
    request = inference_pb2.PredictRequest(
        model="echo", inputs=[common_pb2.NamedTensor(name="input", tensor=encode(x))]
    )
    for _ in range(5):
        stub(e2e).Predict(request, metadata=auth(e2e.keys["metered"]), timeout=30)
    error = rpc_error(lambda: stub(e2e).Predict(request, metadata=auth(e2e.keys["metered"]), timeout=30))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    from grpc_status import rpc_status

    details = unpack_details(rpc_status.from_call(error))  # type: ignore[arg-type]
    assert "QuotaFailure" in details and "RetryInfo" in details
    with (
        pytest.raises(ferryman.QuotaExceeded) as exceeded,
        ferryman.Client(e2e.router, e2e.keys["metered"]) as c,
    ):
        c.predict("echo", x)
    assert exceeded.value.retry_after is not None and 0 < exceeded.value.retry_after <= 60


def test_list_and_get_model(e2e: E2E) -> None:
    models = stub(e2e).ListModels(
        inference_pb2.ListModelsRequest(), metadata=auth(e2e.keys["acme"]), timeout=10
    )
    assert {"mlp", "minilm", "echo", "lonely"} <= {m.name for m in models.models}
    limited = stub(e2e).ListModels(
        inference_pb2.ListModelsRequest(), metadata=auth(e2e.keys["limited"]), timeout=10
    )
    assert [m.name for m in limited.models] == ["echo"]
    info = stub(e2e).GetModel(
        inference_pb2.GetModelRequest(model="mlp"), metadata=auth(e2e.keys["acme"]), timeout=10
    )
    assert {v.version: v.weight for v in info.versions} == {"1": 90, "2": 10}
    assert list(info.versions[0].schema.inputs[0].shape) == [512]


def test_route_changes_reach_the_router(e2e: E2E) -> None:
    x = np.zeros((1, 512), np.float32)
    e2e.writer.set_route("mlp", {"1": 0, "2": 100}, sticky="user")
    changed_at = time.monotonic()
    try:
        while True:
            answer = stub(e2e).Predict(
                mlp_request(x, user="route-watcher"), metadata=auth(e2e.keys["acme"]), timeout=30
            )
            if answer.version == "2":
                break
            assert time.monotonic() - changed_at < PROPAGATION_GUARD_S, "the route change never arrived"
            time.sleep(0.05)
    finally:
        e2e.writer.set_route("mlp", {"1": 90, "2": 10}, sticky="user")


def test_identical_requests_through_both_routers_share_one_execution(topology: Topology) -> None:
    """Each router sends a model to the same batcher (rendezvous), so duplicates coalesce
    across routers, not only within one."""
    x = np.full((1, echo.WIDTH), 5.0, np.float32)
    parameters = {"delay_ms": "200", "case": uuid.uuid4().hex}
    key = topology.e2e.keys["acme"]

    def call(i: int) -> ferryman.Prediction:
        with ferryman.Client(topology.routers[i % 2], key) as client:
            return client.predict("echo", x, parameters=parameters)

    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(call, range(6)))
    assert all(np.array_equal(a.outputs["output"], x * 2) for a in answers)
    assert sum(not a.coalesced for a in answers) == 1, "one execution served all six"


def test_the_topology_serves_through_kill_9_of_a_node_a_batcher_and_a_router(topology: Topology) -> None:
    """Last in this module: nothing restarts what it kills (Kubernetes would)."""
    load = SdkLoad(topology.target, topology.e2e.keys["acme"], clients=LOAD_CLIENTS, pause_s=PAUSE_S)
    try:
        load.answered_after(LOAD_CLIENTS * 10, RECOVER_S)
        failed: dict[str, list[str]] = {}
        for victim in ("rn2", topology.owner("mlp"), "router-0"):
            before = len(load.failed)
            topology.kill(victim)
            recovered_s = load.answered_after(LOAD_CLIENTS * 10, RECOVER_S)
            time.sleep(SETTLE_S)
            failed[victim] = load.failed[before:]
            figures = {"serving_again_s": round(recovered_s, 2), "failed": len(failed[victim])}
            report(f"topology kill -9 {victim}", **figures)
    finally:
        load.stop()
    report("topology kill -9", answered=load.ok, failed=len(load.failed))
    # A dead node's batch runs on another node; a dead batcher's items go to the next
    # batcher in the model's rendezvous order; a dead router's calls are retried by the SDK
    # on the other router. At most the calls in flight on a dead process may fail.
    assert all(len(errors) <= LOAD_CLIENTS for errors in failed.values()), failed
    assert failed["rn2"] == [], "the other nodes take a dead node's batches"
