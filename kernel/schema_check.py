"""Inputs against a version's IO schema: the one validator, for the router (a request's
inputs) and the node (each batch item's). Pure; returns every violation it finds as
(field, description), so a caller can fix them all at once."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ferryman.tensors import DTYPE_BY_NAME, ITEMSIZE_BY_DTYPE, NAME_BY_DTYPE, shape_text
from ferryman.v1 import common_pb2
from ferryman_server.kernel.schema import IOSchema

Violation = tuple[str, str]


@dataclass(frozen=True)
class InputCheck:
    rows: int
    """The item count (rows of the first dimension); 0 when the inputs disagree or are invalid."""
    violations: list[Violation]
    signature: tuple[Any, ...]
    """Per-input shape past the rows ("text" for text): items with equal signatures batch together."""


def check_inputs(inputs: Sequence[common_pb2.NamedTensor], schema: IOSchema) -> InputCheck:
    """Every violation of ``schema`` by ``inputs``; when there are none, their rows and
    shape signature."""
    violations: list[Violation] = []
    by_name: dict[str, common_pb2.NamedTensor] = {}
    for i, value in enumerate(inputs):
        if value.name in by_name:
            violations.append((f"inputs[{i}].name", f"input {value.name!r} given twice"))
        by_name[value.name] = value
    known = {spec.name for spec in schema.inputs}
    violations += [(f"inputs.{name}", "not an input of this model") for name in by_name if name not in known]
    rows: set[int] = set()
    signature: list[Any] = []
    size = 0
    for spec in schema.inputs:
        where = f"inputs.{spec.name}"
        found = by_name.get(spec.name)
        if found is None:
            violations.append((where, "missing"))
            continue
        value = found
        kind = value.WhichOneof("value")
        if spec.text:
            if kind != "text":
                violations.append((where, "expected text"))
                continue
            texts = value.text.values
            rows.add(len(texts))
            signature.append("text")
            size += sum(len(t) for t in texts)
            if spec.max_text_length:
                violations += [
                    (f"{where}.values[{i}]", f"longer than {spec.max_text_length} characters")
                    for i, t in enumerate(texts)
                    if len(t) > spec.max_text_length
                ]
            continue
        if kind != "tensor":
            violations.append((where, f"expected a {spec.dtype} tensor"))
            continue
        tensor = value.tensor
        want = DTYPE_BY_NAME[spec.dtype]
        if tensor.dtype != want:
            got = NAME_BY_DTYPE.get(tensor.dtype, str(tensor.dtype))
            violations.append((f"{where}.dtype", f"expected {spec.dtype}, got {got}"))
            continue
        shape = list(tensor.shape)
        expected = ["rows", *(str(d) if d > 0 else "any" for d in spec.shape)]
        if len(shape) != 1 + len(spec.shape) or any(
            d < 1 or (w != -1 and w != d) for w, d in zip(spec.shape, shape[1:], strict=False)
        ):
            violations.append(
                (f"{where}.shape", f"expected [{', '.join(expected)}], got {shape_text(shape)}")
            )
            continue
        need = math.prod(shape) * ITEMSIZE_BY_DTYPE[want]
        if len(tensor.data) != need:
            violations.append(
                (f"{where}.data", f"has {len(tensor.data)} bytes, shape {shape_text(shape)} needs {need}")
            )
            continue
        rows.add(shape[0])
        signature.append(tuple(shape[1:]))
        size += len(tensor.data)
    if len(rows) > 1:
        violations.append(("inputs", f"inputs disagree on the number of items: {sorted(rows)}"))
    count = next(iter(rows)) if len(rows) == 1 else 0
    if not violations and count < 1:
        violations.append(("inputs", "a request needs at least one item"))
    if count > schema.max_items:
        violations.append(("inputs", f"{count} items exceed this model's limit of {schema.max_items}"))
    if size > schema.max_bytes:
        violations.append(("inputs", f"{size} bytes exceed this model's limit of {schema.max_bytes}"))
    return InputCheck(rows=count, violations=violations, signature=tuple(signature))
