"""What a refusal repeats of the request is bounded: a tensor with a million dimensions, a
model name of 100,000 characters and a 1 MB request id each get INVALID_ARGUMENT whose whole
status (message and google.rpc details) is a few hundred bytes, on the native door and the
OIP gRPC door, and the router goes on serving. Part of the abuse suite."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from router_platform import E2E

from ferryman.errors import status_of
from ferryman.oip.v2 import grpc_predict_v2_pb2, grpc_predict_v2_pb2_grpc
from ferryman.tensors import encode
from ferryman.v1 import common_pb2, inference_pb2, inference_pb2_grpc
from ferryman_server.gpu_node.demo import echo

pytestmark = pytest.mark.abuse

TIMEOUT_S = 30.0
MOST_STATUS_BYTES = 2048
DIMS = 1_000_000


def native(stub: inference_pb2_grpc.InferenceStub, key: str, request: inference_pb2.PredictRequest) -> int:
    """The size of the status a bad request is refused with (asserting the code)."""
    with pytest.raises(grpc.RpcError) as refused:
        stub.Predict(request, metadata=(("authorization", f"Bearer {key}"),), timeout=TIMEOUT_S)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (refused.value.details() or "")[:200]
    return len(status_of(refused.value).SerializeToString())


def test_huge_shapes_names_and_ids_are_refused_with_a_bounded_status(e2e: E2E) -> None:
    key = e2e.keys["acme"]
    stub = inference_pb2_grpc.InferenceStub(grpc.insecure_channel(e2e.router))
    many_dims = common_pb2.Tensor(dtype=common_pb2.DATA_TYPE_FP32, shape=[1] * DIMS, data=b"\x00" * 4)
    requests = [
        inference_pb2.PredictRequest(
            model="echo", inputs=[common_pb2.NamedTensor(name="input", tensor=many_dims)]
        ),
        inference_pb2.PredictRequest(model="m" * 100_000),
        inference_pb2.PredictRequest(request_id="r" * 1_000_000, model="echo"),
        inference_pb2.PredictRequest(
            model="echo", inputs=[common_pb2.NamedTensor(name="n" * 100_000, tensor=many_dims)]
        ),
    ]
    sizes = [native(stub, key, request) for request in requests]
    assert max(sizes) < MOST_STATUS_BYTES, sizes
    x = encode(np.ones((1, echo.WIDTH), np.float32))
    good = inference_pb2.PredictRequest(model="echo", inputs=[common_pb2.NamedTensor(name="input", tensor=x)])
    assert stub.Predict(good, metadata=(("authorization", f"Bearer {key}"),), timeout=TIMEOUT_S).outputs


def test_the_oip_door_bounds_what_it_echoes_too(e2e: E2E) -> None:
    stub = grpc_predict_v2_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(e2e.router))
    request = grpc_predict_v2_pb2.ModelInferRequest(
        model_name="echo",
        inputs=[
            grpc_predict_v2_pb2.ModelInferRequest.InferInputTensor(
                name="input", datatype="FP32", shape=[1] * DIMS, contents={"fp32_contents": [0.0]}
            )
        ],
    )
    with pytest.raises(grpc.RpcError) as refused:
        stub.ModelInfer(
            request, metadata=(("authorization", f"Bearer {e2e.keys['acme']}"),), timeout=TIMEOUT_S
        )
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert len(status_of(refused.value).SerializeToString()) < MOST_STATUS_BYTES
