"""The node's behaviour behind its gRPC servicer: slots, batches, load/unload, drain."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from google.rpc import code_pb2

# Public as grpc_health.v1.health.aio; imported by module path so type checkers see it.
from grpc_health.v1._async import HealthServicer
from opentelemetry.trace import SpanKind

from ferryman.durations import seconds_of, set_seconds
from ferryman.v1 import node_pb2
from ferryman_kernel.serving import NOT_SERVING, SERVING
from ferryman_kernel.telemetry import links, parent_context, tracer
from gpu_node.executor import run_batch
from gpu_node.fetch import ArtifactCache
from gpu_node.generation import lora
from gpu_node.generation.limits import OverBudget
from gpu_node.loader import LoadError, load_version, locate, parse_schema
from gpu_node.metrics import NodeMetrics
from gpu_node.settings import NodeSettings
from gpu_node.slots import LatencyProfile, ModelSlot, SlotState
from registry.states import ModelFormat, NodeLifecycle, next_node_lifecycle


class NodeRefusal(Exception):
    """A request the node turns away; ``code`` names the gRPC status to answer with."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class NodeService:
    """Holds loaded versions and runs their batches in worker threads."""

    def __init__(
        self,
        settings: NodeSettings,
        device: torch.device,
        health_servicer: HealthServicer,
        metrics: NodeMetrics,
        artifacts: ArtifactCache | None = None,
    ):
        self.settings = settings
        self.artifacts = artifacts
        """Where remote artifacts are fetched to (None: local paths only)."""
        self.metrics = metrics
        self._tracer = tracer("ferryman.node")
        self.device = device
        self.lifecycle = NodeLifecycle.STARTING
        self.slots: dict[str, ModelSlot] = {}
        self._health = health_servicer
        self._batch_pool = ThreadPoolExecutor(settings.capacity, thread_name_prefix="node-batch")
        # One load at a time: loads compete for memory and would skew warm-up timings.
        self._load_pool = ThreadPoolExecutor(1, thread_name_prefix="node-load")
        self._load_lock = asyncio.Lock()

    def set_lifecycle(self, target: NodeLifecycle) -> None:
        self.lifecycle = next_node_lifecycle(self.lifecycle, target)
        self.metrics.up.set(1 if target == NodeLifecycle.READY else 0)

    def _count_versions(self) -> None:
        for state in SlotState:
            self.metrics.loaded.labels(state=state.value).set(
                sum(1 for slot in self.slots.values() if slot.state == state)
            )

    def failures(self) -> dict[str, str]:
        """Versions that failed here (fetch, checksum, load, warm-up), with why."""
        return {key: slot.reason for key, slot in self.slots.items() if slot.state == SlotState.FAILED}

    def serving_keys(self) -> list[str]:
        return sorted(key for key, slot in self.slots.items() if slot.state == SlotState.SERVING)

    async def _load_lm(self, slot: ModelSlot) -> None:
        """A causal-LM version: its engine, sized by the generation_* settings."""
        from gpu_node.generation.runtime import CausalLM, EngineLimits, load_causal_lm
        from gpu_node.generation.scheduler import Admission

        limits = EngineLimits(
            self.settings.generation_slots,
            self.settings.generation_max_len,
            self.settings.generation_step_tokens,
            Admission(self.settings.generation_admission),
            self.settings.generation_active_s,
            self.settings.generation_precision,
            self.settings.generation_prefix_cache,
        )
        loop = asyncio.get_running_loop()
        # A download can take minutes: off the event loop, as the load itself.
        path = await loop.run_in_executor(self._load_pool, locate, slot.spec, self.artifacts)
        if lora.is_adapter(path):
            await self._load_adapter(slot, path)
            return
        try:
            loaded = await loop.run_in_executor(self._load_pool, load_causal_lm, path, limits, self.device)
        except Exception as exc:
            raise LoadError(f"loading {path} as causal_lm failed: {type(exc).__name__}: {exc}") from exc
        labels = {"model": slot.spec.model, "version": slot.spec.version}
        slot.lm, slot.schema = CausalLM(loaded, loop, self.metrics, labels), parse_schema(slot.spec)

    async def _load_adapter(self, slot: ModelSlot, path: Path) -> None:
        """A LoRA adapter version: loaded into the engine of its base version, which must be
        SERVING on this node (``base_model_name_or_path`` in its config names it as
        ``model:version``); its generations share the base's slots and batches."""
        base_key = lora.base_of(path)
        base = self.slots.get(base_key)
        if base is None or base.state != SlotState.SERVING or base.lm is None or base.adapter:
            raise LoadError(f"adapter over {base_key[:200]!r}: that base version is not serving on this node")
        lm = base.lm
        try:
            adapter = await asyncio.get_running_loop().run_in_executor(self._load_pool, lm.add_adapter, path)
        except ValueError as exc:
            raise LoadError(f"adapter {path}: {exc}") from None
        slot.lm, slot.adapter, slot.base = lm, adapter, base_key
        slot.schema = parse_schema(slot.spec)

    async def load(self, spec: node_pb2.ModelVersionSpec) -> ModelSlot:
        """Load a version beside the others; a failure marks only it FAILED."""
        key = f"{spec.model}:{spec.version}"
        async with self._load_lock:
            existing = self.slots.get(key)
            if existing is not None and existing.state in (SlotState.SERVING, SlotState.UNLOADING):
                return existing
            slot = ModelSlot(spec=spec, profile=self._profile())
            self.slots[key] = slot
            await self._health.set(key, NOT_SERVING)
            loop = asyncio.get_running_loop()
            # Loads run one at a time, so what the process gained meanwhile is this one's.
            before = self._held()
            if spec.format == ModelFormat.CAUSAL_LM:
                try:
                    await self._load_lm(slot)
                except LoadError as exc:
                    slot.move(SlotState.FAILED, str(exc))
                    self._count_versions()
                    return slot
                self._serving(slot, before)
                await self._health.set(key, SERVING)
                return slot
            try:
                runtime, schema, profile = await loop.run_in_executor(
                    self._load_pool,
                    lambda: load_version(
                        spec,
                        self.device,
                        runs=self.settings.warmup_runs,
                        smoothing=self.settings.profile_smoothing,
                        cache=self.artifacts,
                    ),
                )
            except LoadError as exc:
                slot.move(SlotState.FAILED, str(exc))
                self._count_versions()
                return slot
            slot.runtime, slot.schema, slot.profile = runtime, schema, profile
            self._serving(slot, before)
            await self._health.set(key, SERVING)
            return slot

    def _held(self) -> int:
        """Memory this process holds on its device: CUDA's allocated bytes, or resident ones."""
        if self.device.type == "cuda":
            return int(torch.cuda.memory_allocated(self.device))
        return self._memory()[1]

    def _serving(self, slot: ModelSlot, before: int) -> None:
        """``slot`` loaded: it serves, holding what the process gained since ``before``, and
        a causal LM's whole KV cache (on a CPU it is mapped only as sequences write it)."""
        slot.memory_bytes = max(0, self._held() - before)
        if slot.lm is not None and not slot.adapter and self.device.type == "cpu":
            slot.memory_bytes += slot.lm.cache_bytes
        self.metrics.version_memory.labels(model=slot.spec.model, version=slot.spec.version).set(
            slot.memory_bytes
        )
        slot.move(SlotState.SERVING)
        self._count_versions()

    async def unload(self, model: str, version: str) -> bool:
        """Stop taking batches for a version, wait for its in-flight ones, free it."""
        key = f"{model}:{version}"
        slot = self.slots.get(key)
        if slot is None:
            return False
        if slot.state == SlotState.SERVING:
            slot.move(SlotState.UNLOADING)
            await self._health.set(key, NOT_SERVING)
            # The grace period is the promise; stragglers finish on a dropped runtime.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(slot.idle.wait(), timeout=self.settings.drain_grace_s)
        self.slots.pop(key, None)
        self._count_versions()
        with contextlib.suppress(KeyError):  # never served: never measured
            self.metrics.version_memory.remove(model, version)
        if slot.lm is not None and slot.adapter:
            slot.lm.remove_adapter(slot.adapter)  # the engine is its base's
        elif slot.lm is not None:
            # Adapters over this version cannot serve without it.
            for adapter in [s for s in self.slots.values() if s.base == key]:
                await self.unload(adapter.spec.model, adapter.spec.version)
            await slot.lm.close()
        slot.lm = None
        slot.runtime = None
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        return True

    async def infer(self, request: node_pb2.InferBatchRequest) -> node_pb2.InferBatchResponse:
        """Run one batch; per-item problems are answered per item."""
        if self.lifecycle == NodeLifecycle.DRAINING:
            raise NodeRefusal("UNAVAILABLE", "node is draining")
        key = f"{request.model}:{request.version}"
        slot = self.slots.get(key)
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
                "ferryman.node": self.settings.name,
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
        response = node_pb2.InferBatchResponse(
            items=result.outcomes, batch_size=result.rows, node=self.settings.name
        )
        set_seconds(response.compute, result.compute_seconds)
        return response

    async def generate(self, request: node_pb2.NodeGenerateRequest) -> AsyncIterator[node_pb2.GenerateEvent]:
        """Stream one generation; refusals (NodeRefusal) come before the first event."""
        if self.lifecycle == NodeLifecycle.DRAINING:
            raise NodeRefusal("UNAVAILABLE", "node is draining")
        key = f"{request.model}:{request.version}"
        slot = self.slots.get(key)
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

    def info(self) -> node_pb2.NodeInfoResponse:
        total, used = self._memory()
        return node_pb2.NodeInfoResponse(
            name=self.settings.name,
            device=str(self.device),
            memory_total=total,
            memory_used=used,
            versions=[slot.to_proto() for _, slot in sorted(self.slots.items())],
            lifecycle=self.lifecycle.value,
            capacity=self.settings.capacity,
        )

    async def drain(self) -> bool:
        """Refuse new batches, report NOT_SERVING, wait for in-flight ones (up to the grace)."""
        if self.lifecycle != NodeLifecycle.DRAINING:
            self.set_lifecycle(NodeLifecycle.DRAINING)
        await self._health.enter_graceful_shutdown()
        waits = [slot.idle.wait() for slot in self.slots.values()]
        try:
            await asyncio.wait_for(asyncio.gather(*waits), timeout=self.settings.drain_grace_s)
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        """Stop the generation engines (their workers deliver to this loop), then the pools."""
        for slot in self.slots.values():
            if slot.lm is not None and not slot.adapter:  # an adapter's engine is its base's
                await slot.lm.close()
            slot.lm = None
        self._batch_pool.shutdown(wait=False, cancel_futures=True)
        self._load_pool.shutdown(wait=False, cancel_futures=True)

    def _profile(self) -> LatencyProfile:
        return LatencyProfile(smoothing=self.settings.profile_smoothing)

    def _memory(self) -> tuple[int, int]:
        if self.device.type == "cuda":
            free, total = torch.cuda.mem_get_info(self.device)
            return int(total), int(total - free)
        page = os.sysconf("SC_PAGE_SIZE")
        total = os.sysconf("SC_PHYS_PAGES") * page
        with open("/proc/self/statm") as statm:
            resident = int(statm.read().split()[1]) * page
        return int(total), resident
