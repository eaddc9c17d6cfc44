"""Bounds on what a tenant sends besides the schema's own (no sockets): every door's
request passes check_request before anything echoes or runs it."""

from __future__ import annotations

from ferryman.v1 import common_pb2, inference_pb2
from ferryman_server.router.bounds import MAX_INPUTS, MAX_NAME_CHARS, check_request


def request(*names: str) -> inference_pb2.PredictRequest:
    return inference_pb2.PredictRequest(model="mlp", inputs=[common_pb2.NamedTensor(name=n) for n in names])


def test_input_count_and_names_are_bounded_before_they_are_echoed() -> None:
    assert check_request(request("input")) == []
    assert check_request(request(*(f"x{i}" for i in range(MAX_INPUTS + 1)))) == [
        ("inputs", f"more than {MAX_INPUTS} inputs")
    ]
    assert check_request(request("ok", "n" * (MAX_NAME_CHARS + 1))) == [
        ("inputs[1].name", f"longer than {MAX_NAME_CHARS} characters")
    ]


def test_ids_users_and_parameters_are_bounded() -> None:
    bad = inference_pb2.PredictRequest(
        model="", request_id="r" * 129, user="u" * 129, parameters={"k" * 65: "v"}
    )
    fields = [field for field, _ in check_request(bad)]
    assert fields == ["request_id", "user", "model", f"parameters.{'k' * 64}…"]
