"""Open Inference Protocol tensors <-> Ferryman's ``NamedTensor``, for the OIP gRPC and REST
doors alike. Pure: every problem is a ``TensorProblem`` naming the field, which the doors
answer as INVALID_ARGUMENT with a BadRequest violation.

Numeric tensors keep their bytes (raw contents are taken as they are; typed or JSON
contents go through one numpy conversion). ``BYTES`` tensors are text: one UTF-8 string
per item, so their shape is ``[n]`` or ``[n, 1]``.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from ferryman.oip.v2 import grpc_predict_v2_pb2 as oip
from ferryman.tensors import (
    DTYPE_BY_NAME,
    NAME_BY_DTYPE,
    NUMPY_BY_DTYPE,
    TensorError,
    check_tensor,
    shape_text,
)
from ferryman.v1 import common_pb2
from ferryman_server.router.bounds import MAX_INPUTS, clip

BYTES = "BYTES"
"""OIP's datatype of strings; Ferryman's text."""
MAX_ELEMENTS = 1 << 24
"""Most elements one input may declare (64 MiB of FP32): bounds work before any is read."""
MAX_TEXT_ELEMENTS = 4096
"""Most strings one BYTES input may carry: each is a Python object, so bound them before parsing."""
LENGTH_PREFIX = struct.Struct("<I")
"""BYTES elements in raw contents: a 4-byte little-endian length, then the bytes."""

# Typed contents field per datatype (Triton's rules: small ints travel widened).
CONTENTS_FIELD = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    BYTES: "bytes_contents",
}


class TensorProblem(ValueError):
    """One input that cannot be converted: where, and why."""

    def __init__(self, field: str, description: str) -> None:
        super().__init__(f"{field}: {description}")
        self.field = field
        self.description = description


def wire_dtype(datatype: str, field: str) -> common_pb2.DataType:
    dtype = DTYPE_BY_NAME.get(datatype)
    if dtype is None:
        known = ", ".join([*sorted(DTYPE_BY_NAME), BYTES])
        raise TensorProblem(f"{field}.datatype", f"unsupported datatype {clip(datatype)!r} (one of {known})")
    return dtype


def element_count(shape: Sequence[int], field: str) -> int:
    if not shape or any(d < 0 for d in shape):
        raise TensorProblem(f"{field}.shape", f"needs non-negative dimensions, got {shape_text(shape)}")
    count = math.prod(shape)
    if count > MAX_ELEMENTS:
        raise TensorProblem(f"{field}.shape", f"more than {MAX_ELEMENTS} elements")
    return count


def text_items(shape: Sequence[int], field: str) -> int:
    count = element_count(shape, field)
    if len(shape) > 2 or (len(shape) == 2 and shape[1] != 1):
        raise TensorProblem(
            f"{field}.shape", f"BYTES inputs are one string per item: [n] or [n, 1], got {shape_text(shape)}"
        )
    if count > MAX_TEXT_ELEMENTS:
        raise TensorProblem(f"{field}.shape", f"more than {MAX_TEXT_ELEMENTS} strings")
    return count


def decode_strings(values: Sequence[bytes], field: str) -> list[str]:
    try:
        return [value.decode() for value in values]
    except UnicodeDecodeError as exc:
        raise TensorProblem(field, f"a BYTES element is not UTF-8 ({exc.reason})") from None


def split_raw_strings(raw: bytes, count: int, field: str) -> list[bytes]:
    """The ``count`` length-prefixed elements of raw BYTES contents."""
    values: list[bytes] = []
    offset = 0
    for _ in range(count):
        if offset + LENGTH_PREFIX.size > len(raw):
            raise TensorProblem(field, f"raw BYTES contents hold fewer than {count} elements")
        (length,) = LENGTH_PREFIX.unpack_from(raw, offset)
        offset += LENGTH_PREFIX.size
        if offset + length > len(raw):
            raise TensorProblem(field, "a raw BYTES element runs past the end of the contents")
        values.append(raw[offset : offset + length])
        offset += length
    if offset != len(raw):
        raise TensorProblem(field, f"raw BYTES contents hold more than {count} elements")
    return values


def text_input(name: str, strings: list[str]) -> common_pb2.NamedTensor:
    return common_pb2.NamedTensor(name=name, text=common_pb2.TextList(values=strings))


def tensor_input(
    name: str, dtype: common_pb2.DataType, shape: Sequence[int], data: bytes, field: str
) -> common_pb2.NamedTensor:
    tensor = common_pb2.Tensor(dtype=dtype, shape=list(shape), data=data)
    try:
        check_tensor(tensor)
    except TensorError as exc:
        raise TensorProblem(field, str(exc)) from None
    return common_pb2.NamedTensor(name=name, tensor=tensor)


def from_raw(
    name: str, datatype: str, shape: Sequence[int], raw: bytes, field: str
) -> common_pb2.NamedTensor:
    """An input whose contents came as raw bytes (gRPC raw_input_contents, REST binary data)."""
    if datatype == BYTES:
        count = text_items(shape, field)
        return text_input(name, decode_strings(split_raw_strings(raw, count, field), field))
    dtype = wire_dtype(datatype, field)
    element_count(shape, field)
    return tensor_input(name, dtype, shape, raw, field)


def from_values(
    name: str, datatype: str, shape: Sequence[int], values: Any, field: str
) -> common_pb2.NamedTensor:
    """An input given element by element: gRPC typed contents or REST JSON ``data``
    (flat or nested lists, row-major)."""
    if values is None:
        raise TensorProblem(f"{field}.data", "required (or the binary extension's binary_data_size)")
    if datatype == BYTES:
        count = text_items(shape, field)
        flat = list(np.asarray(values, dtype=object).reshape(-1)) if values else []
        if len(flat) != count:
            raise TensorProblem(f"{field}.data", f"{len(flat)} elements for shape {shape_text(shape)}")
        if all(isinstance(v, bytes) for v in flat):
            return text_input(name, decode_strings(flat, field))
        if not all(isinstance(v, str) for v in flat):
            raise TensorProblem(f"{field}.data", "BYTES elements must be strings")
        return text_input(name, flat)
    dtype = wire_dtype(datatype, field)
    count = element_count(shape, field)
    np_dtype = NUMPY_BY_DTYPE.get(dtype)
    if np_dtype is None:  # BF16 has no numpy type; it can only travel raw
        raise TensorProblem(f"{field}.datatype", f"{datatype} inputs must come as raw or binary data")
    try:
        array = np.asarray(values, dtype=np_dtype).reshape(-1)
    except (ValueError, TypeError, OverflowError) as exc:
        raise TensorProblem(f"{field}.data", f"not {datatype} numbers: {clip(str(exc))}") from None
    if array.size != count:
        raise TensorProblem(f"{field}.data", f"{array.size} elements for shape {shape_text(shape)}")
    return tensor_input(name, dtype, shape, array.tobytes(), field)


def grpc_inputs(request: oip.ModelInferRequest) -> list[common_pb2.NamedTensor]:
    """The inputs of an OIP gRPC request, from raw or typed contents (counted before any is
    converted: each costs work, and the router's bound comes after)."""
    if len(request.inputs) > MAX_INPUTS:
        raise TensorProblem("inputs", f"more than {MAX_INPUTS} inputs")
    raw = request.raw_input_contents
    if raw and len(raw) != len(request.inputs):
        raise TensorProblem("raw_input_contents", f"{len(raw)} entries for {len(request.inputs)} inputs")
    converted = []
    for i, tensor in enumerate(request.inputs):
        field = f"inputs[{i}]"
        if raw:
            if tensor.HasField("contents"):
                raise TensorProblem(f"{field}.contents", "not allowed beside raw_input_contents")
            converted.append(from_raw(tensor.name, tensor.datatype, tensor.shape, raw[i], field))
            continue
        contents_field = CONTENTS_FIELD.get(tensor.datatype)
        if contents_field is None:
            wire_dtype(tensor.datatype, field)  # unknown datatypes are named as such
            raise TensorProblem(field, f"{tensor.datatype} inputs must come as raw_input_contents")
        values = getattr(tensor.contents, contents_field)
        converted.append(from_values(tensor.name, tensor.datatype, tensor.shape, list(values), field))
    return converted


def datatype(named: common_pb2.NamedTensor) -> str:
    return BYTES if named.WhichOneof("value") == "text" else NAME_BY_DTYPE[named.tensor.dtype]


def shape(named: common_pb2.NamedTensor) -> list[int]:
    return [len(named.text.values)] if named.WhichOneof("value") == "text" else list(named.tensor.shape)


def raw_contents(named: common_pb2.NamedTensor) -> bytes:
    """An output as OIP raw contents (BYTES: length-prefixed UTF-8)."""
    if named.WhichOneof("value") != "text":
        return named.tensor.data
    parts = []
    for text in named.text.values:
        encoded = text.encode()
        parts += [LENGTH_PREFIX.pack(len(encoded)), encoded]
    return b"".join(parts)


def json_data(named: common_pb2.NamedTensor) -> list[Any]:
    """An output as a flat JSON list, row-major."""
    if named.WhichOneof("value") == "text":
        return list(named.text.values)
    tensor = named.tensor
    np_dtype = NUMPY_BY_DTYPE.get(tensor.dtype)
    if np_dtype is None:  # BF16: its 16-bit words widened to float32
        words = np.frombuffer(tensor.data, dtype="<u2").astype("<u4") << 16
        return list(words.view("<f4").tolist())
    return list(np.frombuffer(tensor.data, dtype=np_dtype).tolist())


def select_outputs(
    outputs: Sequence[common_pb2.NamedTensor], wanted: Sequence[str]
) -> list[common_pb2.NamedTensor]:
    """The outputs a request asked for by name, in its order (none asked: all)."""
    if not wanted:
        return list(outputs)
    by_name = {output.name: output for output in outputs}
    missing = [name for name in wanted if name not in by_name]
    if missing:
        raise TensorProblem("outputs", f"not an output of this model: {clip(', '.join(missing))}")
    return [by_name[name] for name in wanted]
