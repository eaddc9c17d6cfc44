"""Malformed requests get INVALID_ARGUMENT (or NOT_FOUND for unknown models), never a crash,
a hang or an INTERNAL error, and the router keeps serving with bounded memory."""

from __future__ import annotations

import os
import random
import resource
import time

import grpc
import numpy as np
import pytest
from figures import report
from router_platform import E2E

from ferryman.tensors import encode
from ferryman.v1 import common_pb2, inference_pb2, inference_pb2_grpc
from ferryman_server.router.settings import RouterSettings

# Left out of make test-fast: a long fuzz of every door.
pytestmark = [pytest.mark.slow, pytest.mark.abuse]

REQUESTS = 10_000
KINDS = 10
STREAM_TIMEOUT_S = 120.0
RSS_GROWTH_LIMIT_MB = 200
DTYPES = list(common_pb2.DataType.keys())  # names: the constructor takes them


TEXT_REQUEST = inference_pb2.PredictRequest(
    model="minilm", inputs=[common_pb2.NamedTensor(name="text", text=common_pb2.TextList(values=["AB"]))]
).SerializeToString()
BAD_UTF8 = TEXT_REQUEST.replace(b"AB", b"\xff\xfe")
TRUNCATED = b"\x0a\xff\xff\xff"  # a length-delimited field longer than the message


def malformed(rng: random.Random, i: int) -> bytes:
    """The i-th malformed request as wire bytes (some of them do not even parse)."""
    kind = i % KINDS
    if kind == 8:
        return BAD_UTF8
    if kind == 9:
        return TRUNCATED
    return malformed_message(rng, kind).SerializeToString()


def malformed_message(rng: random.Random, kind: int) -> inference_pb2.PredictRequest:
    if kind == 0:  # random bytes, random shape
        shape = [rng.randint(0, 4) for _ in range(rng.randint(0, 3))]
        tensor = common_pb2.Tensor(
            dtype=rng.choice(DTYPES), shape=shape, data=rng.randbytes(rng.randint(0, 64))
        )
    elif kind == 1:  # right shape, wrong dtype
        tensor = common_pb2.Tensor(dtype=common_pb2.DATA_TYPE_INT64, shape=[1, 512], data=bytes(8 * 512))
    elif kind == 2:  # huge declared shape, tiny data
        tensor = common_pb2.Tensor(dtype=common_pb2.DATA_TYPE_FP32, shape=[1, 10**12], data=b"\x00" * 4)
    elif kind == 3:  # negative dimension
        tensor = common_pb2.Tensor(dtype=common_pb2.DATA_TYPE_FP32, shape=[-1, 512], data=b"")
    elif kind == 4:  # data one byte short
        tensor = common_pb2.Tensor(dtype=common_pb2.DATA_TYPE_FP32, shape=[1, 512], data=bytes(4 * 512 - 1))
    elif kind == 5:  # empty request
        return inference_pb2.PredictRequest(model="mlp")
    elif kind == 6:  # text where a tensor belongs
        return inference_pb2.PredictRequest(
            model="mlp", inputs=[common_pb2.NamedTensor(name="input", text=common_pb2.TextList(values=["x"]))]
        )
    else:  # one item more than the model takes
        tensor = common_pb2.Tensor(dtype=common_pb2.DATA_TYPE_FP32, shape=[65, 512], data=bytes(4 * 512 * 65))
    return inference_pb2.PredictRequest(
        model="mlp", inputs=[common_pb2.NamedTensor(name="input", tensor=tensor)]
    )


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_malformed_requests_are_refused_cleanly(e2e: E2E) -> None:
    rng = random.Random(7)
    stub = inference_pb2_grpc.InferenceStub(grpc.insecure_channel(e2e.router))
    metadata = (("authorization", f"Bearer {e2e.keys['acme']}"),)
    before = rss_mb()
    started = time.monotonic()
    codes: dict[int, int] = {}
    with grpc.insecure_channel(e2e.router) as channel:
        # No request serializer: the bytes go on the wire as they are, unparseable ones included.
        stream = channel.stream_stream(
            "/ferryman.v1.Inference/PredictStream",
            request_serializer=None,
            response_deserializer=inference_pb2.PredictStreamResponse.FromString,
        )
        # Made as they are sent and counted as they come: the test itself holds none of them.
        requests = (malformed(rng, i) for i in range(REQUESTS))
        for answer in stream(requests, metadata=metadata, timeout=STREAM_TIMEOUT_S):
            assert answer.WhichOneof("result") == "error", answer.request_id
            codes[answer.error.code] = codes.get(answer.error.code, 0) + 1
            assert answer.error.message
    assert sum(codes.values()) == REQUESTS
    assert set(codes) == {grpc.StatusCode.INVALID_ARGUMENT.value[0]}, codes
    # Still serving, and the process (router, batcher and nodes share it here) did not balloon.
    good = inference_pb2.PredictRequest(
        model="mlp",
        inputs=[
            common_pb2.NamedTensor(
                name="input",
                tensor=common_pb2.Tensor(
                    dtype=common_pb2.DATA_TYPE_FP32,
                    shape=[1, 512],
                    data=np.zeros((1, 512), np.float32).tobytes(),
                ),
            )
        ],
    )
    assert stub.Predict(good, metadata=metadata, timeout=30).outputs
    grown = rss_mb() - before
    assert grown < RSS_GROWTH_LIMIT_MB, f"pid {os.getpid()} grew {grown:.0f} MB"
    report(
        "malformed soak",
        requests=REQUESTS,
        invalid_argument=codes[grpc.StatusCode.INVALID_ARGUMENT.value[0]],
        seconds=round(time.monotonic() - started, 1),
        max_rss_growth_mb=round(grown, 1),
    )


def test_oversize_message_is_refused_and_the_router_keeps_serving(e2e: E2E) -> None:
    metadata = (("authorization", f"Bearer {e2e.keys['acme']}"),)
    limit = RouterSettings().max_message_bytes
    rows = limit // (4 * 512) + 1
    huge = inference_pb2.PredictRequest(
        model="mlp",
        inputs=[
            common_pb2.NamedTensor(
                name="input",
                tensor=common_pb2.Tensor(
                    dtype=common_pb2.DATA_TYPE_FP32, shape=[rows, 512], data=bytes(rows * 4 * 512)
                ),
            )
        ],
    )
    options = [("grpc.max_send_message_length", -1)]
    with grpc.insecure_channel(e2e.router, options=options) as channel:
        stub = inference_pb2_grpc.InferenceStub(channel)
        try:
            stub.Predict(huge, metadata=metadata, timeout=30)
            raise AssertionError("an oversize message was accepted")
        except grpc.RpcError as error:
            # gRPC's own limit, enforced before any Ferryman code runs: a clear code and message.
            assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error
            assert "larger than max" in (error.details() or ""), error.details()
        x = np.zeros((1, 512), np.float32)
        good = inference_pb2.PredictRequest(
            model="mlp", inputs=[common_pb2.NamedTensor(name="input", tensor=encode(x))]
        )
        assert stub.Predict(good, metadata=metadata, timeout=30).outputs


def test_unparseable_messages_are_invalid_argument(e2e: E2E) -> None:
    metadata = (("authorization", f"Bearer {e2e.keys['acme']}"),)
    with grpc.insecure_channel(e2e.router) as channel:
        # No request serializer: the raw bytes go on the wire as they are.
        predict = channel.unary_unary(
            "/ferryman.v1.Inference/Predict",
            request_serializer=None,
            response_deserializer=inference_pb2.PredictResponse.FromString,
        )
        for payload in (BAD_UTF8, TRUNCATED):
            try:
                predict(payload, metadata=metadata, timeout=10)
                raise AssertionError("an unparseable request was accepted")
            except grpc.RpcError as error:
                assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error
                assert "could not be parsed" in (error.details() or "")
        stream = channel.stream_stream(
            "/ferryman.v1.Inference/PredictStream",
            request_serializer=None,
            response_deserializer=inference_pb2.PredictStreamResponse.FromString,
        )
        answers = list(stream(iter([BAD_UTF8, TEXT_REQUEST]), metadata=metadata, timeout=30))
    codes = sorted(a.error.code if a.WhichOneof("result") == "error" else 0 for a in answers)
    assert codes == [0, grpc.StatusCode.INVALID_ARGUMENT.value[0]]
