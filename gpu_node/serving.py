"""What a node serves: batches of a loaded version in worker threads, and generations of a
causal LM, each refused (``NodeRefusal``) before any work when it cannot run."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor

from google.rpc import code_pb2
from opentelemetry.trace import SpanKind

from ferryman.durations import seconds_of, set_seconds
from ferryman.v1 import node_pb2
from ferryman_server.gpu_node.executor import run_batch
from ferryman_server.gpu_node.generation.limits import OverBudget
from ferryman_server.gpu_node.metrics import NodeMetrics
from ferryman_server.gpu_node.slots import SlotState
from ferryman_server.gpu_node.versions import Versions
from ferryman_server.kernel.telemetry import links, parent_context, tracer


class NodeRefusal(Exception):
    """A request the node turns away; ``code`` names the gRPC status to answer with."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class Serving:
    """Runs the node's batches and generations over its versions."""

    def __init__(
        self, name: str, capacity: int, versions: Versions, metrics: NodeMetrics, draining: Callable[[], bool]
    ) -> None:
        self.name = name
        self.versions = versions
        self.metrics = metrics
        self._draining = draining
        self._tracer = tracer("ferryman.node")
        self._batch_pool = ThreadPoolExecutor(capacity, thread_name_prefix="node-batch")

    async def infer(self, request: node_pb2.InferBatchRequest) -> node_pb2.InferBatchResponse:
        """Run one batch; per-item problems are answered per item."""
        if self._draining():
            raise NodeRefusal("UNAVAILABLE", "node is draining")
        key = f"{request.model}:{request.version}"
        slot = self.versions.slots.get(key)
        if slot is not None and slot.lm is not None:
            raise NodeRefusal("FAILED_PRECONDITION", f"version {key} generates text: call Generate")
        if slot is None or slot.state != SlotState.SERVING or slot.runtime is None or slot.schema is None:
            state = slot.state if slot else "not loaded"
            raise NodeRefusal("FAILED_PRECONDITION", f"version {key} is {state} on this node")
        if not request.items:
            raise NodeRefusal("INVALID_ARGUMENT", "a batch needs at least one item")
        if len(request.items) > slot.spec.max_batch_size:
            raise NodeRefusal(
                "INVALID_ARGUMENT",
                f"{len(request.items)} items exceed the max batch size {slot.spec.max_batch_size}",
            )
        runtime, schema = slot.runtime, slot.schema
        span = self._tracer.start_span(
            "node.batch",
            context=parent_context(request.traceparent),  # a child of the batcher's dispatch
            kind=SpanKind.SERVER,
            links=links([item.traceparent for item in request.items]),
            attributes={
                "ferryman.model": request.model,
                "ferryman.version": request.version,
                "ferryman.items": len(request.items),
                "ferryman.node": self.name,
                "ferryman.batch_id": request.batch_id,
            },
        )
        slot.begin()
        try:
            result = await asyncio.get_running_loop().run_in_executor(
                self._batch_pool,
                run_batch,
                runtime,
                schema,
                list(request.items),
                dict(request.parameters),
            )
        except BaseException:
            span.end()
            raise
        finally:
            slot.end()
        span.set_attribute("ferryman.batch_size", result.rows)
        span.end()
        if result.rows:
            slot.profile.record(result.rows, result.compute_seconds)
        labels = {"model": request.model, "version": request.version}
        self.metrics.batches.labels(**labels).inc()
        self.metrics.compute.labels(**labels).observe(result.compute_seconds)
        for outcome in result.outcomes:
            if outcome.status.code:
                reason = (
                    "invalid_input" if outcome.status.code == code_pb2.INVALID_ARGUMENT else "model_error"
                )
                self.metrics.item_errors.labels(**labels, reason=reason).inc()
        response = node_pb2.InferBatchResponse(items=result.outcomes, batch_size=result.rows, node=self.name)
        set_seconds(response.compute, result.compute_seconds)
        return response

    async def generate(self, request: node_pb2.NodeGenerateRequest) -> AsyncIterator[node_pb2.GenerateEvent]:
        """Stream one generation; refusals (NodeRefusal) come before the first event."""
        if self._draining():
            raise NodeRefusal("UNAVAILABLE", "node is draining")
        key = f"{request.model}:{request.version}"
        slot = self.versions.slots.get(key)
        if slot is None or slot.state != SlotState.SERVING or slot.lm is None:
            state = slot.state if slot else "not loaded"
            raise NodeRefusal("FAILED_PRECONDITION", f"version {key} is not a SERVING causal LM ({state})")
        if bool(request.prompt) == bool(request.messages):
            raise NodeRefusal("INVALID_ARGUMENT", "give either a prompt or chat messages")
        if request.max_tokens < 1:
            raise NodeRefusal("INVALID_ARGUMENT", "max_tokens must be at least 1")
        lm = slot.lm
        try:
            prompt, constraint = await asyncio.get_running_loop().run_in_executor(
                self._batch_pool, lm.prepare, request
            )
        except ValueError as exc:
            raise NodeRefusal("INVALID_ARGUMENT", str(exc)) from None
        start_by = float("inf")
        if request.HasField("start_within"):
            start_by = time.monotonic() + seconds_of(request.start_within)
        stream = lm.generate(request, prompt, start_by, constraint, slot.adapter)
        slot.begin()
        try:
            try:
                first = await anext(stream)
            except OverBudget as exc:
                raise NodeRefusal("RESOURCE_EXHAUSTED", str(exc)) from None
            except ValueError as exc:
                raise NodeRefusal("INVALID_ARGUMENT", str(exc)) from None
            yield first
            async for event in stream:
                yield event
        finally:
            await stream.aclose()
            slot.end()

    def close(self) -> None:
        self._batch_pool.shutdown(wait=False, cancel_futures=True)
