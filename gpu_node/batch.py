"""Turn an InferBatch request into device batches, and the results back into items.

Each item is validated against the version's IO schema on its own: a bad item fails
alone with INVALID_ARGUMENT and the others run. Valid items are grouped by per-item
shape (free dimensions may differ between items) and each group's tensors are built
by joining the items' raw bytes, one copy, no per-element Python.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
import torch
from google.rpc import status_pb2

from ferryman.errors import make_status
from ferryman.schema import IOSchema, TensorSpec
from ferryman.tensors import DTYPE_BY_NAME, ITEMSIZE_BY_DTYPE, NAME_BY_DTYPE, DataType
from ferryman.v1 import common_pb2, node_pb2
from gpu_node.runtimes.base import BatchInput

TORCH_BY_DTYPE: dict[DataType, torch.dtype] = {
    common_pb2.DATA_TYPE_BOOL: torch.bool,
    common_pb2.DATA_TYPE_UINT8: torch.uint8,
    common_pb2.DATA_TYPE_INT8: torch.int8,
    common_pb2.DATA_TYPE_INT16: torch.int16,
    common_pb2.DATA_TYPE_INT32: torch.int32,
    common_pb2.DATA_TYPE_INT64: torch.int64,
    common_pb2.DATA_TYPE_FP16: torch.float16,
    common_pb2.DATA_TYPE_FP32: torch.float32,
    common_pb2.DATA_TYPE_FP64: torch.float64,
    common_pb2.DATA_TYPE_BF16: torch.bfloat16,
}
DTYPE_BY_TORCH = {torch_dtype: dtype for dtype, torch_dtype in TORCH_BY_DTYPE.items()}


class ItemInvalid(ValueError):
    """An item that does not fit the schema; ``violations`` are (field, description)."""

    def __init__(self, violations: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{f}: {d}" for f, d in violations))
        self.violations = violations


@dataclass
class Group:
    """Valid items of one per-item shape, ready to run as one batch."""

    indices: list[int] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    values: dict[str, list[common_pb2.NamedTensor]] = field(default_factory=dict)

    @property
    def total_rows(self) -> int:
        return sum(self.rows)


def _check_tensor_item(spec: TensorSpec, value: common_pb2.NamedTensor, where: str) -> int:
    if value.WhichOneof("value") != "tensor":
        raise ItemInvalid([(where, "expected a tensor, got text")])
    tensor = value.tensor
    want_dtype = DTYPE_BY_NAME[spec.dtype]
    if tensor.dtype != want_dtype:
        got = NAME_BY_DTYPE.get(tensor.dtype, str(tensor.dtype))
        raise ItemInvalid([(f"{where}.dtype", f"expected {spec.dtype}, got {got}")])
    shape = list(tensor.shape)
    if len(shape) != 1 + len(spec.shape):
        raise ItemInvalid(
            [(f"{where}.shape", f"expected [rows, {', '.join(map(str, spec.shape))}], got {shape}")]
        )
    if shape[0] < 1:
        raise ItemInvalid([(f"{where}.shape", "the first (rows) dimension must be at least 1")])
    for axis, (want, got_dim) in enumerate(zip(spec.shape, shape[1:], strict=True), start=1):
        if got_dim < 1 or (want != -1 and want != got_dim):
            raise ItemInvalid([(f"{where}.shape", f"dimension {axis} must be {want}, got {got_dim}")])
    need = math.prod(shape) * ITEMSIZE_BY_DTYPE[want_dtype]
    if len(tensor.data) != need:
        raise ItemInvalid([(f"{where}.data", f"has {len(tensor.data)} bytes, shape {shape} needs {need}")])
    return shape[0]


def _check_text_item(spec: TensorSpec, value: common_pb2.NamedTensor, where: str) -> int:
    if value.WhichOneof("value") != "text":
        raise ItemInvalid([(where, "expected text")])
    texts = value.text.values
    if not texts:
        raise ItemInvalid([(where, "needs at least one string")])
    if spec.max_text_length:
        for i, text in enumerate(texts):
            if len(text) > spec.max_text_length:
                raise ItemInvalid(
                    [(f"{where}.values[{i}]", f"longer than {spec.max_text_length} characters")]
                )
    return len(texts)


def check_item(item: node_pb2.BatchItem, schema: IOSchema) -> tuple[int, tuple[Any, ...]]:
    """Validate one item; return its rows and its shape signature (for grouping)."""
    by_name = {value.name: value for value in item.inputs}
    expected = {spec.name for spec in schema.inputs}
    unknown = sorted(set(by_name) - expected)
    if unknown:
        raise ItemInvalid([(f"inputs.{name}", "not an input of this model") for name in unknown])
    if len(by_name) != len(item.inputs):
        raise ItemInvalid([("inputs", "an input name appears twice")])
    rows: dict[str, int] = {}
    signature: list[Any] = []
    for spec in schema.inputs:
        where = f"inputs.{spec.name}"
        value = by_name.get(spec.name)
        if value is None:
            raise ItemInvalid([(where, "missing")])
        if spec.text:
            rows[spec.name] = _check_text_item(spec, value, where)
            signature.append("text")
        else:
            rows[spec.name] = _check_tensor_item(spec, value, where)
            signature.append(tuple(value.tensor.shape[1:]))
    if len(set(rows.values())) != 1:
        raise ItemInvalid([("inputs", f"inputs disagree on the number of rows: {rows}")])
    count = next(iter(rows.values()))
    if count > schema.max_items:
        raise ItemInvalid([("inputs", f"{count} rows exceed this model's limit of {schema.max_items}")])
    size = item.ByteSize()
    if size > schema.max_bytes:
        raise ItemInvalid([("inputs", f"{size} bytes exceed this model's limit of {schema.max_bytes}")])
    return count, tuple(signature)


def plan(
    items: Sequence[node_pb2.BatchItem], schema: IOSchema
) -> tuple[list[Group], dict[int, status_pb2.Status]]:
    """Group the valid items by shape; return the groups and the invalid items' errors."""
    groups: dict[tuple[Any, ...], Group] = {}
    errors: dict[int, status_pb2.Status] = {}
    for index, item in enumerate(items):
        try:
            rows, signature = check_item(item, schema)
        except ItemInvalid as exc:
            errors[index] = make_status(
                grpc.StatusCode.INVALID_ARGUMENT, str(exc), reason="INVALID_INPUT", violations=exc.violations
            )
            continue
        group = groups.setdefault(signature, Group())
        group.indices.append(index)
        group.rows.append(rows)
        for value in item.inputs:
            group.values.setdefault(value.name, []).append(value)
    return list(groups.values()), errors


def build_inputs(group: Group, schema: IOSchema) -> dict[str, BatchInput]:
    """The group's batch: tensors from the joined raw bytes, strings as one list."""
    inputs: dict[str, BatchInput] = {}
    for spec in schema.inputs:
        values = group.values[spec.name]
        if spec.text:
            inputs[spec.name] = [text for value in values for text in value.text.values]
            continue
        first = values[0].tensor
        joined = bytearray().join(value.tensor.data for value in values)
        flat = torch.frombuffer(joined, dtype=TORCH_BY_DTYPE[first.dtype]) if joined else torch.empty(0)
        inputs[spec.name] = flat.reshape(group.total_rows, *first.shape[1:])
    return inputs


def split_outputs(
    outputs: Mapping[str, torch.Tensor], rows: Sequence[int], schema: IOSchema
) -> list[list[common_pb2.NamedTensor]]:
    """Per item, its rows of every output as wire tensors."""
    total = sum(rows)
    per_item: list[list[common_pb2.NamedTensor]] = [[] for _ in rows]
    for spec in schema.outputs:
        if spec.name not in outputs:
            raise RuntimeError(f"model did not return output {spec.name!r}")
        tensor = outputs[spec.name].detach().to("cpu").contiguous()
        if tensor.dim() == 0 or tensor.shape[0] != total:
            raise RuntimeError(f"output {spec.name!r} has shape {list(tensor.shape)}, expected {total} rows")
        dtype = DTYPE_BY_TORCH.get(tensor.dtype)
        if dtype is None:
            raise RuntimeError(f"output {spec.name!r} has unsupported dtype {tensor.dtype}")
        # numpy has no bfloat16; its bytes travel as 16-bit words.
        array = (tensor.view(torch.int16) if tensor.dtype == torch.bfloat16 else tensor).numpy()
        tail = list(tensor.shape[1:])
        start = 0
        for i, count in enumerate(rows):
            chunk = array[start : start + count]
            start += count
            per_item[i].append(
                common_pb2.NamedTensor(
                    name=spec.name,
                    tensor=common_pb2.Tensor(dtype=dtype, shape=[count, *tail], data=chunk.tobytes()),
                )
            )
    return per_item


def slice_inputs(inputs: Mapping[str, BatchInput], start: int, stop: int) -> dict[str, BatchInput]:
    """Rows start..stop of every input (for splitting a batch that ran out of memory)."""
    return {name: value[start:stop] for name, value in inputs.items()}
