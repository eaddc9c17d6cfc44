"""IO schemas of model versions: what the registry stores and the router validates.

The same contract exists as ``ferryman.v1.IOSchema`` on the wire; this module is its
validated Python form, stored as JSON in the registry.
"""

from __future__ import annotations

from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ferryman.tensors import DTYPE_BY_NAME
from ferryman.v1 import common_pb2

# Names in the registry: the wire enum's, without DATA_TYPE_ and never UNSPECIFIED (one set,
# derived in ferryman.tensors).
DTYPES: tuple[str, ...] = tuple(DTYPE_BY_NAME)


class TensorSpec(BaseModel):
    """One named input or output: a tensor of fixed dtype, or text."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=64)
    dtype: str = ""
    """One of DTYPES for tensors; empty for text."""
    shape: tuple[int, ...] = ()
    """Per-item shape without the item dimension; -1 marks a free dimension."""
    text: bool = False
    max_text_length: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.text:
            if self.dtype or self.shape:
                raise ValueError(f"text spec {self.name!r} takes no dtype or shape")
        else:
            if self.dtype not in DTYPES:
                raise ValueError(f"spec {self.name!r}: dtype must be one of {', '.join(DTYPES)}")
            if any(d == 0 or d < -1 for d in self.shape):
                raise ValueError(f"spec {self.name!r}: dimensions are positive or -1")
        return self

    def to_proto(self) -> common_pb2.TensorSpec:
        return common_pb2.TensorSpec(
            name=self.name,
            dtype=f"DATA_TYPE_{self.dtype or 'UNSPECIFIED'}",
            shape=list(self.shape),
            text=self.text,
            max_text_length=self.max_text_length,
        )


class IOSchema(BaseModel):
    """Inputs, outputs and per-request size limits of a model version."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    inputs: tuple[TensorSpec, ...] = Field(min_length=1)
    outputs: tuple[TensorSpec, ...] = Field(min_length=1)
    max_items: int = Field(default=64, ge=1)
    max_bytes: int = Field(default=4 * 1024 * 1024, ge=1)

    @model_validator(mode="after")
    def _unique_names(self) -> Self:
        for kind, specs in (("input", self.inputs), ("output", self.outputs)):
            names = [s.name for s in specs]
            if len(names) != len(set(names)):
                raise ValueError(f"duplicate {kind} names: {names}")
        return self

    def to_proto(self) -> common_pb2.IOSchema:
        return common_pb2.IOSchema(
            inputs=[s.to_proto() for s in self.inputs],
            outputs=[s.to_proto() for s in self.outputs],
            max_items=self.max_items,
            max_bytes=self.max_bytes,
        )

    @classmethod
    def from_proto(cls, proto: common_pb2.IOSchema) -> IOSchema:
        """Validate a wire IOSchema (raises pydantic.ValidationError when it is unusable)."""

        def spec(s: common_pb2.TensorSpec) -> dict[str, object]:
            dtype = common_pb2.DataType.Name(s.dtype).removeprefix("DATA_TYPE_")
            return {
                "name": s.name,
                "dtype": "" if s.text or dtype == "UNSPECIFIED" else dtype,
                "shape": list(s.shape),
                "text": s.text,
                "max_text_length": s.max_text_length,
            }

        return cls.model_validate(
            {
                "inputs": [spec(s) for s in proto.inputs],
                "outputs": [spec(s) for s in proto.outputs],
                "max_items": proto.max_items or cls.model_fields["max_items"].default,
                "max_bytes": proto.max_bytes or cls.model_fields["max_bytes"].default,
            }
        )
