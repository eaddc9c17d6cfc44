"""Run one InferBatch on a runtime (called in a worker thread, never on the event loop)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import grpc
import torch

from ferryman.errors import Reason, make_status, ok_status
from ferryman.v1 import common_pb2, node_pb2
from ferryman_server.gpu_node.batch import build_inputs, plan, slice_inputs, split_outputs
from ferryman_server.gpu_node.handler import BatchInput, RuntimeOutput
from ferryman_server.gpu_node.runtimes.base import Runtime
from ferryman_server.kernel.schema import IOSchema


@dataclass
class BatchResult:
    outcomes: list[node_pb2.ItemOutcome]
    compute_seconds: float
    rows: int


def predict_splitting(
    runtime: Runtime, inputs: Mapping[str, BatchInput], rows: int, parameters: Mapping[str, str]
) -> RuntimeOutput:
    """Run the batch; on device out-of-memory run each half instead, recursively."""
    try:
        return runtime.predict(inputs, parameters)
    except torch.cuda.OutOfMemoryError:
        if rows <= 1:
            raise
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        half = rows // 2
        first = predict_splitting(runtime, slice_inputs(inputs, 0, half), half, parameters)
        second = predict_splitting(runtime, slice_inputs(inputs, half, rows), rows - half, parameters)
        return RuntimeOutput(
            outputs={name: torch.cat([first.outputs[name], second.outputs[name]]) for name in first.outputs},
            input_tokens=[*first.input_tokens, *second.input_tokens],
        )


def run_batch(
    runtime: Runtime,
    schema: IOSchema,
    items: Sequence[node_pb2.BatchItem],
    parameters: Mapping[str, str],
) -> BatchResult:
    """Validate, group, run and split one batch; every item gets its own outcome."""
    groups, errors = plan(items, schema)
    outcomes: list[node_pb2.ItemOutcome | None] = [None] * len(items)
    for index, status in errors.items():
        outcomes[index] = node_pb2.ItemOutcome(request_id=items[index].request_id, status=status)
    compute = 0.0
    rows_run = 0
    for group in groups:
        started = time.perf_counter()
        try:
            inputs = build_inputs(group, schema)
            result = predict_splitting(runtime, inputs, group.total_rows, parameters)
            per_item = split_outputs(result.outputs, group.rows, schema)
        except Exception as exc:  # a model error fails this group; the batcher bisects it
            compute += time.perf_counter() - started
            status = make_status(
                grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}", reason=Reason.MODEL_ERROR
            )
            for index in group.indices:
                outcomes[index] = node_pb2.ItemOutcome(request_id=items[index].request_id, status=status)
            continue
        compute += time.perf_counter() - started
        rows_run += group.total_rows
        tokens = list(result.input_tokens)
        start = 0
        for index, count, outputs in zip(group.indices, group.rows, per_item, strict=True):
            item_tokens = sum(tokens[start : start + count]) if tokens else 0
            start += count
            outcomes[index] = node_pb2.ItemOutcome(
                request_id=items[index].request_id,
                status=ok_status(),
                outputs=outputs,
                usage=common_pb2.Usage(items=count, input_tokens=item_tokens),
            )
    return BatchResult(
        outcomes=[o for o in outcomes if o is not None], compute_seconds=compute, rows=rows_run
    )
