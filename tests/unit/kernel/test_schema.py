from __future__ import annotations

import pytest
from pydantic import ValidationError

from ferryman.v1 import common_pb2
from ferryman_server.kernel.schema import IOSchema

MLP = {
    "inputs": [{"name": "input", "dtype": "FP32", "shape": [512]}],
    "outputs": [{"name": "output", "dtype": "FP32", "shape": [10]}],
}


def test_schema_round_trips_to_proto() -> None:
    schema = IOSchema.model_validate(MLP)
    proto = schema.to_proto()
    assert proto.inputs[0].dtype == common_pb2.DATA_TYPE_FP32
    assert list(proto.inputs[0].shape) == [512]
    assert proto.max_items == schema.max_items


@pytest.mark.parametrize(
    "bad",
    [
        {"inputs": [], "outputs": MLP["outputs"]},
        {"inputs": [{"name": "x", "dtype": "FLOAT", "shape": [1]}], "outputs": MLP["outputs"]},
        {"inputs": [{"name": "x", "dtype": "FP32", "shape": [0]}], "outputs": MLP["outputs"]},
        {"inputs": [{"name": "t", "text": True, "dtype": "FP32"}], "outputs": MLP["outputs"]},
        {"inputs": MLP["inputs"] * 2, "outputs": MLP["outputs"]},
        {**MLP, "surprise": 1},
    ],
)
def test_invalid_schemas_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        IOSchema.model_validate(bad)
