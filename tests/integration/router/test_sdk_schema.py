"""A client keeps each model's schema; a new version that changes it must not leave the
client failing INVALID_INPUT for good: it asks the schema again, once per call."""

from __future__ import annotations

import time
import uuid

import grpc
import numpy as np
import pytest
from batcher_platform import register
from router_platform import E2E, ECHO_HANDLER

from ferryman.sdk import Client
from ferryman.v1 import common_pb2, inference_pb2, inference_pb2_grpc
from ferryman_server.gpu_node.demo import echo

pytestmark = pytest.mark.slow

PROPAGATION_GUARD_S = 60.0
"""Stops a test that would wait forever for a route to reach the router; it times nothing."""


def routed_dtypes(e2e: E2E, model: str) -> set[int]:
    """The input dtypes of the versions the route sends traffic to."""
    stub = inference_pb2_grpc.InferenceStub(grpc.insecure_channel(e2e.router))
    info = stub.GetModel(
        inference_pb2.GetModelRequest(model=model),
        metadata=[("authorization", f"Bearer {e2e.keys['acme']}")],
        timeout=10,
    )
    return {v.schema.inputs[0].dtype for v in info.versions if v.weight > 0}


def test_a_changed_schema_is_asked_again(in_process_e2e: E2E) -> None:
    e2e = in_process_e2e
    model = f"morph-{uuid.uuid4().hex[:6]}"
    artifact = echo.write_config(e2e.common.data_dir / f"{model}.json")
    register(e2e.writer, model, "1", artifact, "python", echo.SCHEMA, handler=ECHO_HANDLER)
    e2e.writer.set_route(model, {"1": 100})
    rows = [[1.0, 2.0, 3.0, 4.0]]  # a plain list: the client encodes it by the schema's dtype
    with Client(e2e.router, api_key=e2e.keys["acme"]) as client:
        deadline = time.monotonic() + PROPAGATION_GUARD_S
        while True:
            try:
                first = client.predict(model, rows)
                break
            except Exception:
                assert time.monotonic() < deadline, "the model never became servable"
                time.sleep(0.2)
        assert np.asarray(first.outputs["output"]).dtype == np.float32
        wider = {
            "inputs": [{"name": "input", "dtype": "FP64", "shape": [echo.WIDTH]}],
            "outputs": [{"name": "output", "dtype": "FP64", "shape": [echo.WIDTH]}],
        }
        register(e2e.writer, model, "2", artifact, "python", wider, handler=ECHO_HANDLER)
        e2e.writer.set_route(model, {"2": 100})
        while routed_dtypes(e2e, model) != {common_pb2.DATA_TYPE_FP64}:
            assert time.monotonic() < deadline, "the route never reached the router"
            time.sleep(0.2)
        again = client.predict(model, rows)  # its copy of the schema says FP32
    output = np.asarray(again.outputs["output"])
    assert again.version == "2" and output.dtype == np.float64
    assert np.array_equal(output, np.array(rows) * 2)
