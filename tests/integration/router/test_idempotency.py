"""A request id the client chose buys one request, for every tenant, on every door: a
repeat with the same request is answered with the first call's kept answer (waiting while
it runs), never executed again uncounted; another request under the id is ALREADY_EXISTS.
Over real gRPC and HTTP, the co-hosted memory store and two routers sharing real Redis."""

from __future__ import annotations

import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
import pytest
from doors import DOOR_NAMES, Answer, Door, Refusal, every_door
from router_platform import E2E, wait_known

import ferryman
from ferryman.sdk.errors import RequestIdReused
from ferryman.tensors import encode
from ferryman.v1 import common_pb2, inference_pb2, inference_pb2_grpc
from ferryman_server.gpu_node.demo import echo
from ferryman_server.quota.settings import QuotaSettings
from ferryman_server.registry.specs import QuotaLimits

pytestmark = pytest.mark.abuse

TIMEOUT_S = 60.0
REPLAYS_PER_ID = 40
IDS = 5


def auth(key: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {key}"),)


def echo_request(value: float, request_id: str, version: str = "") -> inference_pb2.PredictRequest:
    x = np.full((1, echo.WIDTH), value, np.float32)
    return inference_pb2.PredictRequest(
        request_id=request_id,
        model="echo",
        version=version,
        inputs=[common_pb2.NamedTensor(name="input", tensor=encode(x))],
    )


def call(stub: inference_pb2_grpc.InferenceStub, request: inference_pb2.PredictRequest, key: str) -> bytes:
    """The whole answer, serialized (a re-run differs at least in its timings), or the code."""
    try:
        answer: inference_pb2.PredictResponse = stub.Predict(request, metadata=auth(key), timeout=TIMEOUT_S)
    except grpc.RpcError as exc:
        return str(exc.code().name).encode()
    return answer.SerializeToString()


def inputs_for(door: Door, value: int) -> tuple[str, dict[str, np.ndarray | list[str]]]:
    if door.tensors:
        return "echo", {"input": np.full((1, echo.WIDTH), value, np.float32)}
    return "minilm", {"text": [f"request number {value}"]}


@pytest.mark.parametrize("door_name", DOOR_NAMES)
def test_an_id_buys_one_request_without_a_policy_on_every_door(e2e: E2E, door_name: str) -> None:
    """acme has no quota policy: the id still binds to the first request."""
    door = {d.name: d for d in every_door(e2e.router, e2e.http)}[door_name]
    request_id = f"once-{uuid.uuid4().hex[:8]}"
    model, first_inputs = inputs_for(door, 0)
    first = door.predict(e2e.keys["acme"], model, first_inputs, request_id=request_id)
    assert isinstance(first, Answer), first
    for value in range(1, 6):  # five other requests under the used id: none served
        _, other = inputs_for(door, value)
        refused = door.predict(e2e.keys["acme"], model, other, request_id=request_id)
        assert isinstance(refused, Refusal) and refused.code == "ALREADY_EXISTS", refused
    again = door.predict(e2e.keys["acme"], model, first_inputs, request_id=request_id)
    assert isinstance(again, Answer) and again.version == first.version
    for name, values in first.outputs.items():
        np.testing.assert_array_equal(again.outputs[name], values)
    # Another tenant's id space is its own: the same id is a first request there.
    other_tenant = door.predict(e2e.keys["insider"], model, inputs_for(door, 9)[1], request_id=request_id)
    assert isinstance(other_tenant, Answer)


def test_a_replay_flood_runs_each_id_once(e2e: E2E) -> None:
    """rpm 5, five ids replayed from five threads: five executions; a replay is answered
    with its id's first answer or, past the rate (replays count as requests once their
    first call has answered), refused RESOURCE_EXHAUSTED; a fresh id is refused too."""
    key = e2e.new_tenant("replayer", QuotaLimits(rpm=IDS))
    wait_known([e2e.router], key)
    stub = inference_pb2_grpc.InferenceStub(grpc.insecure_channel(e2e.router))
    ids = [f"flood-{i}-{uuid.uuid4().hex[:6]}" for i in range(IDS)]
    calls = [(i, ids[i]) for _ in range(REPLAYS_PER_ID) for i in range(IDS)]
    with ThreadPoolExecutor(IDS) as pool:
        answers = list(pool.map(lambda c: (c[1], call(stub, echo_request(c[0], c[1]), key)), calls))
    failed = Counter(a for _, a in answers if not a.startswith(b"\n"))
    assert set(failed) <= {b"RESOURCE_EXHAUSTED"}, failed
    distinct = {
        request_id: {a for i, a in answers if i == request_id and a.startswith(b"\n")} for request_id in ids
    }
    assert all(len(kept) == 1 for kept in distinct.values()), {i: len(k) for i, k in distinct.items()}
    assert failed[b"RESOURCE_EXHAUSTED"] > 0, "answered replays past rpm 5 are refused, not free"
    fresh = call(stub, echo_request(0, f"fresh-{uuid.uuid4().hex[:6]}"), key)
    assert fresh == b"RESOURCE_EXHAUSTED"


def test_replays_of_a_running_request_wait_for_its_answer(e2e: E2E) -> None:
    """max_concurrency 1 and a slow version: 20 replays sent while the first runs all get
    its answer; none ran beside it (the slot held them out, and nothing ran uncounted)."""
    key = e2e.new_tenant("waiter", QuotaLimits(max_concurrency=1))
    wait_known([e2e.router], key)
    stub = inference_pb2_grpc.InferenceStub(grpc.insecure_channel(e2e.router))
    request_id = f"slow-{uuid.uuid4().hex[:6]}"
    with ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(lambda _: call(stub, echo_request(7, request_id, "slow"), key), range(20)))
    assert len(set(answers)) == 1 and answers[0].startswith(b"\n"), Counter(a[:40] for a in answers)
    response = inference_pb2.PredictResponse.FromString(answers[0])
    assert response.request_id == request_id and response.version == "slow"


def test_two_routers_on_redis_answer_a_repeat_alike(e2e: E2E, redis_url: str) -> None:
    """The kept answer lives in the store the routers share: a repeat on the other router
    gets it byte for byte; another request under the id is refused there too."""
    routers = [e2e.start_router(QuotaSettings(backend="redis", redis_url=redis_url))[0] for _ in range(2)]
    key = e2e.keys["acme"]
    wait_known(routers, key)
    stubs = [inference_pb2_grpc.InferenceStub(grpc.insecure_channel(r)) for r in routers]
    request_id = f"shared-{uuid.uuid4().hex[:6]}"
    first = call(stubs[0], echo_request(3, request_id), key)
    assert first.startswith(b"\n")
    assert call(stubs[1], echo_request(3, request_id), key) == first
    assert call(stubs[1], echo_request(4, request_id), key) == b"ALREADY_EXISTS"
    assert call(stubs[0], echo_request(3, request_id), key) == first


def test_the_sdk_raises_a_typed_error_for_a_reused_id(e2e: E2E) -> None:
    request_id = f"sdk-{uuid.uuid4().hex[:6]}"
    with ferryman.Client(e2e.router, api_key=e2e.keys["acme"]) as client:
        first = client.predict("echo", np.full((1, echo.WIDTH), 1, np.float32), request_id=request_id)
        again = client.predict("echo", np.full((1, echo.WIDTH), 1, np.float32), request_id=request_id)
        np.testing.assert_array_equal(first.outputs["output"], again.outputs["output"])
        with pytest.raises(RequestIdReused) as reused:
            client.predict("echo", np.full((1, echo.WIDTH), 2, np.float32), request_id=request_id)
    assert reused.value.request_id == request_id
