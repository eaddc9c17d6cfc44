"""The versions a node holds and their lifecycle: load (models, causal LMs, LoRA adapters)
within the memory budget, evict, unload, and what failed here with why."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch

# Public as grpc_health.v1.health.aio; imported by module path so type checkers see it.
from grpc_health.v1._async import HealthServicer

from ferryman.v1 import node_pb2
from ferryman_server.gpu_node.fetch import ArtifactCache
from ferryman_server.gpu_node.generation import lora
from ferryman_server.gpu_node.loader import BaseNotServing, LoadError, load_version, locate, parse_schema
from ferryman_server.gpu_node.memory import MIB, NodeMemory
from ferryman_server.gpu_node.metrics import NodeMetrics
from ferryman_server.gpu_node.runtimes.factory import prepare_format
from ferryman_server.gpu_node.settings import NodeSettings
from ferryman_server.gpu_node.slots import LatencyProfile, ModelSlot, SlotState
from ferryman_server.kernel.artifacts import artifact_path
from ferryman_server.kernel.placement import victims
from ferryman_server.kernel.serving import NOT_SERVING, SERVING
from ferryman_server.registry.states import ModelFormat

log = logging.getLogger("ferryman.node")

Audit = Callable[[str, str, dict[str, object]], Awaitable[None]]
"""action, ``model:version``, detail -> recorded in the registry's audit log."""


@dataclass(frozen=True)
class LoadOutcome:
    """What a load came to: the version's slot (SERVING, or FAILED with why), whether it
    failed only for want of room, and what was evicted for it."""

    slot: ModelSlot
    no_room: bool = False
    evicted: tuple[str, ...] = ()
    need: int = 0
    """With ``no_room``: the bytes it was expected, or measured, to need."""


def artifact_bytes(spec: node_pb2.ModelVersionSpec) -> int:
    """The size of a local artifact (a file, or a directory's files); 0 for a remote one
    (fetched while it loads) or one that is missing (its load fails)."""
    path = artifact_path(spec.artifact_uri)
    if path is None or not path.exists():
        return 0
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


class Versions:
    """The node's versions by ``model:version``, loaded one at a time."""

    def __init__(
        self,
        settings: NodeSettings,
        device: torch.device,
        memory: NodeMemory,
        health: HealthServicer,
        metrics: NodeMetrics,
        artifacts: ArtifactCache | None = None,
        audit: Audit | None = None,
    ) -> None:
        self.settings = settings
        self.device = device
        self.memory = memory
        self.slots: dict[str, ModelSlot] = {}
        self._health = health
        self.metrics = metrics
        self.artifacts = artifacts
        """Where remote artifacts are fetched to (None: local paths only)."""
        if artifacts is not None:
            artifacts.in_use = self.held_digests
        self._audit = audit
        # One load at a time: loads compete for memory and would skew warm-up timings.
        self._load_pool = ThreadPoolExecutor(1, thread_name_prefix="node-load")
        self._load_lock = asyncio.Lock()

    def held_digests(self) -> set[str]:
        """The artifacts of the versions held here (read from the load thread: one copy of
        the slots, taken at once under the GIL)."""
        return {slot.spec.sha256 for slot in list(self.slots.values()) if slot.spec.sha256}

    def failures(self) -> dict[str, str]:
        """Versions that failed here (fetch, checksum, load, warm-up), with why."""
        return {key: slot.reason for key, slot in self.slots.items() if slot.state == SlotState.FAILED}

    def serves(self, key: str) -> bool:
        """Whether the version ``key`` is SERVING here."""
        slot = self.slots.get(key)
        return slot is not None and slot.state == SlotState.SERVING

    def serving_keys(self) -> list[str]:
        return sorted(key for key, slot in self.slots.items() if slot.state == SlotState.SERVING)

    def profile(self) -> LatencyProfile:
        return LatencyProfile(smoothing=self.settings.profile_smoothing)

    async def load(
        self,
        spec: node_pb2.ModelVersionSpec,
        *,
        pinned: bool = False,
        expected_bytes: int = 0,
        evict: bool = False,
    ) -> LoadOutcome:
        """Load a version beside the others within the memory budget; a failure marks only
        it FAILED.

        ``pinned``: for a placement (never evicted; room is made for it). ``evict``: room
        may be made by evicting idle, unpinned versions, least recently used first.
        ``expected_bytes``: what it measured elsewhere, else its artifact's size counts
        until it is measured here. What does not fit is refused (``no_room``) before any
        work, or unloaded again if it measured bigger than expected; a pinned one stays
        FAILED with why, a load on demand leaves nothing behind.
        """
        key = f"{spec.model}:{spec.version}"
        async with self._load_lock:
            existing = self.slots.get(key)
            if existing is not None and existing.state in (SlotState.SERVING, SlotState.UNLOADING):
                existing.pinned = existing.pinned or pinned
                return LoadOutcome(existing)
            loop = asyncio.get_running_loop()
            # A directory's size is a walk of its files: off the event loop.
            need = max(expected_bytes, await loop.run_in_executor(self._load_pool, artifact_bytes, spec))
            make_room = evict or pinned
            chosen = victims(self.memory.room(self.slots), need)
            if chosen is None or (chosen and not make_room):
                return self._no_room(spec, pinned, need)
            evicted = await self._evict(chosen, key)
            slot = ModelSlot(spec=spec, profile=self.profile(), pinned=pinned, memory_bytes=need)
            self.slots[key] = slot
            await self._health.set(key, NOT_SERVING)
            await loop.run_in_executor(self._load_pool, prepare_format, spec.format)
            # Loads run one at a time, so what the process gained meanwhile is this one's.
            before = self.memory.held()
            try:
                await self._load_into(slot)
            except Exception as exc:  # whatever failed: the version FAILS with why, never stays LOADING
                if not isinstance(exc, LoadError):
                    log.exception("loading %s failed", key)
                slot.move(
                    SlotState.FAILED,
                    str(exc) if isinstance(exc, LoadError) else f"{type(exc).__name__}: {exc}",
                )
                slot.awaits_base = exc.base if isinstance(exc, BaseNotServing) else ""
                slot.memory_bytes = 0
                if not pinned:  # a load on demand's caller has the reason, and may try again later
                    del self.slots[key]
                self.count()
                return LoadOutcome(slot, evicted=evicted)
            measured = self.memory.measure(slot, before)
            # Measured bigger than expected: make the rest of the room now, or give it back.
            others = self.memory.room(self.slots, excluding=key)
            late = victims(others, slot.memory_bytes)
            if late is None or (late and not make_room):
                await self._drop(slot)
                return self._no_room(spec, pinned, measured)
            evicted += await self._evict(late, key)
            self._serve(slot)
            await self._health.set(key, SERVING)
            if self._audit is not None and not pinned:  # a placement's load is audited as placed
                detail: dict[str, object] = {"bytes": slot.memory_bytes, "evicted": list(evicted)}
                await self._audit("node.load", key, detail)
            return LoadOutcome(slot, evicted=evicted)

    async def _load_into(self, slot: ModelSlot) -> None:
        """Load ``slot``'s version: a causal LM's engine, or a runtime warmed up and profiled."""
        if slot.spec.format == ModelFormat.CAUSAL_LM:
            await self._load_lm(slot)
            return
        spec = slot.spec
        slot.runtime, slot.schema, slot.profile = await asyncio.get_running_loop().run_in_executor(
            self._load_pool,
            lambda: load_version(
                spec,
                self.device,
                runs=self.settings.warmup_runs,
                smoothing=self.settings.profile_smoothing,
                cache=self.artifacts,
            ),
        )

    async def _load_lm(self, slot: ModelSlot) -> None:
        """A causal-LM version: its engine, sized by the generation_* settings."""
        from ferryman_server.gpu_node.generation.scheduler import Admission
        from ferryman_server.gpu_node.runtimes.causal_lm import CausalLM, EngineLimits, load_causal_lm

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
            raise BaseNotServing(
                f"adapter over {base_key[:200]!r}: that base version is not serving on this node", base_key
            )
        lm = base.lm
        try:
            adapter = await asyncio.get_running_loop().run_in_executor(self._load_pool, lm.add_adapter, path)
        except ValueError as exc:
            raise LoadError(f"adapter {path}: {exc}") from None
        slot.lm, slot.adapter, slot.base = lm, adapter, base_key
        slot.schema = parse_schema(slot.spec)

    def _no_room(self, spec: node_pb2.ModelVersionSpec, pinned: bool, need: int) -> LoadOutcome:
        key = f"{spec.model}:{spec.version}"
        reason = self.memory.no_room_reason(key, need, self.slots)
        previous = self.slots.get(key)
        if previous is None or not previous.no_room:  # a placement's retries count once
            self.metrics.no_room.labels(model=spec.model, version=spec.version).inc()
        slot = ModelSlot(spec=spec, profile=self.profile(), pinned=pinned, no_room=True)
        slot.move(SlotState.FAILED, reason)
        if pinned:  # a placement's failure is reported (heartbeat) until it is taken back
            self.slots[key] = slot
            self.count()
        return LoadOutcome(slot, no_room=True, need=need)

    async def _evict(self, keys: tuple[str, ...], incoming: str) -> tuple[str, ...]:
        """Unload ``keys`` to make room for ``incoming``; audited and counted."""
        for key in keys:
            slot = self.slots.get(key)
            if slot is None:  # an adapter that went with its base
                continue
            idle_s, held = slot.idle_s(), slot.memory_bytes
            model, _, version = key.partition(":")
            await self.unload(model, version)
            self.metrics.evictions.labels(model=model, version=version).inc()
            log.info(
                "evicted %s (%d MiB, idle %.0f s) to make room for %s", key, held // MIB, idle_s, incoming
            )
            if self._audit is not None:
                await self._audit(
                    "node.evict", key, {"bytes": held, "idle_s": round(idle_s, 3), "for": incoming}
                )
        return keys

    async def _drop(self, slot: ModelSlot) -> None:
        """Free a version that loaded but does not fit after all."""
        slot.move(SlotState.SERVING)
        await self.unload(slot.spec.model, slot.spec.version)

    def _serve(self, slot: ModelSlot) -> None:
        self.metrics.version_memory.labels(model=slot.spec.model, version=slot.spec.version).set(
            slot.memory_bytes
        )
        slot.last_used = time.monotonic()
        slot.move(SlotState.SERVING)
        self.count()

    def count(self) -> None:
        """The versions-by-state gauge, after any change of state."""
        for state in SlotState:
            self.metrics.loaded.labels(state=state.value).set(
                sum(1 for slot in self.slots.values() if slot.state == state)
            )

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
        self.count()
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

    async def idle(self) -> None:
        """Until no version runs anything."""
        await asyncio.gather(*(slot.idle.wait() for slot in self.slots.values()))

    async def close(self) -> None:
        """Stop the generation engines (their workers deliver to this loop), then the load lane."""
        for slot in self.slots.values():
            if slot.lm is not None and not slot.adapter:  # an adapter's engine is its base's
                await slot.lm.close()
            slot.lm = None
        self._load_pool.shutdown(wait=False, cancel_futures=True)
