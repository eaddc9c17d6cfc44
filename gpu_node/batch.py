"""Turn an InferBatch request into device batches, and the results back into items.

Each item is validated against the version's IO schema on its own: a bad item fails
alone with INVALID_ARGUMENT and the others run. Valid items are grouped by per-item
shape (free dimensions may differ between items) and each group's tensors are built
by joining the items' raw bytes, one copy, no per-element Python.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
import torch
from google.rpc import status_pb2

from ferryman.errors import Reason, make_status
from ferryman.tensors import DataType
from ferryman.v1 import common_pb2, node_pb2
from ferryman_server.gpu_node.handler import BatchInput
from ferryman_server.kernel.schema import IOSchema
from ferryman_server.kernel.schema_check import check_inputs

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


@dataclass
class Group:
    """Valid items of one per-item shape, ready to run as one batch."""

    indices: list[int] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    values: dict[str, list[common_pb2.NamedTensor]] = field(default_factory=dict)

    @property
    def total_rows(self) -> int:
        return sum(self.rows)


def plan(
    items: Sequence[node_pb2.BatchItem], schema: IOSchema
) -> tuple[list[Group], dict[int, status_pb2.Status]]:
    """Group the valid items by shape; return the groups and the invalid items' errors."""
    groups: dict[tuple[Any, ...], Group] = {}
    errors: dict[int, status_pb2.Status] = {}
    for index, item in enumerate(items):
        checked = check_inputs(item.inputs, schema)
        if checked.violations:
            message = "; ".join(f"{where}: {what}" for where, what in checked.violations)
            errors[index] = make_status(
                grpc.StatusCode.INVALID_ARGUMENT,
                message,
                reason=Reason.INVALID_INPUT,
                violations=checked.violations,
            )
            continue
        group = groups.setdefault(checked.signature, Group())
        group.indices.append(index)
        group.rows.append(checked.rows)
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
