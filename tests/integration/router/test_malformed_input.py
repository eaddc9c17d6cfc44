"""Malformed requests get INVALID_ARGUMENT (or NOT_FOUND for unknown models), never a crash,
a hang or an INTERNAL error, and the router keeps serving with bounded memory."""

from __future__ import annotations

import os
import random
import resource
import time

import grpc
import numpy as np
from router_platform import E2E

from ferryman.v1 import common_pb2, inference_pb2, inference_pb2_grpc

REQUESTS = 2000
STREAM_TIMEOUT_S = 120.0
RSS_GROWTH_LIMIT_MB = 200
DTYPES = list(common_pb2.DataType.keys())  # names: the constructor takes them


def malformed(rng: random.Random, i: int) -> inference_pb2.PredictRequest:
    kind = i % 8
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
    requests = [malformed(rng, i) for i in range(REQUESTS)]
    for i, request in enumerate(requests):
        request.request_id = f"bad-{i}"
    codes: dict[int, int] = {}
    for answer in stub.PredictStream(iter(requests), metadata=metadata, timeout=STREAM_TIMEOUT_S):
        assert answer.WhichOneof("result") == "error", answer.request_id
        codes[answer.error.code] = codes.get(answer.error.code, 0) + 1
        assert answer.error.message
    assert sum(codes.values()) == REQUESTS
    assert set(codes) == {grpc.StatusCode.INVALID_ARGUMENT.value[0]}, codes
    assert time.monotonic() - started < STREAM_TIMEOUT_S
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
    assert rss_mb() - before < RSS_GROWTH_LIMIT_MB, f"pid {os.getpid()} grew {rss_mb() - before:.0f} MB"


def test_unparseable_messages_are_invalid_argument(e2e: E2E) -> None:
    text = inference_pb2.PredictRequest(
        model="minilm", inputs=[common_pb2.NamedTensor(name="text", text=common_pb2.TextList(values=["AB"]))]
    ).SerializeToString()
    bad_utf8 = text.replace(b"AB", b"\xff\xfe")
    metadata = (("authorization", f"Bearer {e2e.keys['acme']}"),)
    with grpc.insecure_channel(e2e.router) as channel:
        # No request serializer: the raw bytes go on the wire as they are.
        predict = channel.unary_unary(
            "/ferryman.v1.Inference/Predict",
            request_serializer=None,
            response_deserializer=inference_pb2.PredictResponse.FromString,
        )
        for payload in (bad_utf8, b"\x0a\xff\xff\xff"):  # bad UTF-8; a truncated length-delimited field
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
        answers = list(stream(iter([bad_utf8, text]), metadata=metadata, timeout=30))
    codes = sorted(a.error.code if a.WhichOneof("result") == "error" else 0 for a in answers)
    assert codes == [0, grpc.StatusCode.INVALID_ARGUMENT.value[0]]
