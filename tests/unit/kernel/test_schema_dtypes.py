"""One dtype set, derived from the wire enum: UNSPECIFIED is never a valid tensor dtype."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ferryman.tensors import DTYPE_BY_NAME
from ferryman.v1 import common_pb2
from ferryman_server.kernel.schema import DTYPES, IOSchema, TensorSpec


def test_dtypes_are_the_wire_enum_without_unspecified() -> None:
    assert "UNSPECIFIED" not in DTYPES
    assert set(DTYPES) == set(DTYPE_BY_NAME)
    wire = {n.removeprefix("DATA_TYPE_") for n in common_pb2.DataType.keys()}  # noqa: SIM118
    assert set(DTYPES) == wire - {"UNSPECIFIED"}


def test_a_spec_with_an_unspecified_dtype_is_refused_not_a_keyerror_later() -> None:
    with pytest.raises(ValidationError, match="dtype must be one of"):
        TensorSpec(name="x", dtype="UNSPECIFIED", shape=(4,))
    wire = common_pb2.IOSchema(
        inputs=[common_pb2.TensorSpec(name="x", dtype=common_pb2.DATA_TYPE_UNSPECIFIED, shape=[4])],
        outputs=[common_pb2.TensorSpec(name="y", dtype=common_pb2.DATA_TYPE_FP32, shape=[4])],
    )
    with pytest.raises(ValidationError):
        IOSchema.from_proto(wire)
