"""Python values to wire inputs and wire outputs to numpy, for the SDK."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ferryman.tensors import NUMPY_BY_DTYPE, decode, encode
from ferryman.v1 import common_pb2, inference_pb2

Output = np.ndarray | list[str]


def _schema(info: inference_pb2.ModelInfo | None, version: str) -> common_pb2.IOSchema | None:
    """The schema of the version a call will run: the pinned one when the model lists it,
    else the one the route weighs most (a new version's schema is not the old one's)."""
    if info is None or not info.versions:
        return None
    pinned = next((v.schema for v in info.versions if version and v.version == version), None)
    return pinned or max(info.versions, key=lambda v: v.weight).schema


def _spec_for(schema: common_pb2.IOSchema | None, name: str) -> common_pb2.TensorSpec | None:
    return next((spec for spec in schema.inputs if spec.name == name), None) if schema else None


def input_names(info: inference_pb2.ModelInfo | None, version: str = "") -> list[str]:
    schema = _schema(info, version)
    return [spec.name for spec in schema.inputs] if schema else []


def to_named(name: str, value: Any, spec: common_pb2.TensorSpec | None) -> common_pb2.NamedTensor:
    """One input: text (str or strings) or a tensor (numpy, torch, nested lists)."""
    if isinstance(value, str):
        return common_pb2.NamedTensor(name=name, text=common_pb2.TextList(values=[value]))
    if isinstance(value, Sequence) and value and all(isinstance(v, str) for v in value):
        return common_pb2.NamedTensor(name=name, text=common_pb2.TextList(values=list(value)))
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor, without importing torch
        value = value.detach().cpu().numpy()
    array = np.asarray(value)
    if spec is not None and not spec.text and spec.dtype in NUMPY_BY_DTYPE:
        want = NUMPY_BY_DTYPE[spec.dtype]
        if array.dtype != want and np.can_cast(array.dtype, want, casting="same_kind"):
            array = array.astype(want)
        if array.ndim == len(spec.shape):
            array = array[np.newaxis, ...]  # one item given without its item dimension
    elif array.dtype == np.float64:
        array = array.astype(np.float32)
    return common_pb2.NamedTensor(name=name, tensor=encode(array))


def to_inputs(
    inputs: Any, info: inference_pb2.ModelInfo | None, version: str = ""
) -> list[common_pb2.NamedTensor]:
    """A mapping name -> value, or a single value for a single-input model, encoded by the
    schema of ``version`` (else of the version the route weighs most)."""
    schema = _schema(info, version)
    if isinstance(inputs, Mapping):
        return [to_named(str(n), v, _spec_for(schema, str(n))) for n, v in inputs.items()]
    names = input_names(info, version)
    if len(names) != 1:
        raise ValueError(f"model takes inputs {names}: pass a mapping of name -> value")
    return [to_named(names[0], inputs, _spec_for(schema, names[0]))]


def from_outputs(outputs: Sequence[common_pb2.NamedTensor]) -> dict[str, Output]:
    result: dict[str, Output] = {}
    for value in outputs:
        if value.WhichOneof("value") == "text":
            result[value.name] = list(value.text.values)
        else:
            result[value.name] = np.array(decode(value.tensor))
    return result
