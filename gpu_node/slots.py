"""A model version on this node: its state machine, runtime and latency profile."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from ferryman.durations import set_seconds
from ferryman.v1 import node_pb2
from ferryman_server.gpu_node.runtimes.base import Runtime
from ferryman_server.kernel.placement import Held
from ferryman_server.kernel.schema import IOSchema

if TYPE_CHECKING:
    from ferryman_server.gpu_node.runtimes.causal_lm import CausalLM


class SlotState(StrEnum):
    """Lifecycle of a version on one node."""

    LOADING = "LOADING"
    SERVING = "SERVING"
    FAILED = "FAILED"
    UNLOADING = "UNLOADING"

    def to_proto(self) -> node_pb2.VersionState:
        return _PROTO_STATES[self]


_PROTO_STATES: dict[SlotState, node_pb2.VersionState] = {
    SlotState.LOADING: node_pb2.VERSION_STATE_LOADING,
    SlotState.SERVING: node_pb2.VERSION_STATE_SERVING,
    SlotState.FAILED: node_pb2.VERSION_STATE_FAILED,
    SlotState.UNLOADING: node_pb2.VERSION_STATE_UNLOADING,
}


_TRANSITIONS: dict[SlotState, frozenset[SlotState]] = {
    SlotState.LOADING: frozenset({SlotState.SERVING, SlotState.FAILED}),
    SlotState.SERVING: frozenset({SlotState.UNLOADING}),
    SlotState.FAILED: frozenset({SlotState.LOADING}),
    SlotState.UNLOADING: frozenset(),
}


class SlotTransitionError(RuntimeError):
    """A state change the slot's state machine does not allow."""


@dataclass
class LatencyProfile:
    """Measured batch latency per batch size: warm-up first, refined by live batches."""

    smoothing: float
    seconds: dict[int, float] = field(default_factory=dict)

    def record(self, batch_size: int, seconds: float) -> None:
        """Blend a measurement into the moving average of that batch size."""
        old = self.seconds.get(batch_size)
        self.seconds[batch_size] = seconds if old is None else old + self.smoothing * (seconds - old)

    def to_proto(self) -> list[node_pb2.LatencyPoint]:
        points = []
        for size in sorted(self.seconds):
            point = node_pb2.LatencyPoint(batch_size=size)
            set_seconds(point.latency, self.seconds[size])
            points.append(point)
        return points


@dataclass
class ModelSlot:
    """One version on this node."""

    spec: node_pb2.ModelVersionSpec
    profile: LatencyProfile
    schema: IOSchema | None = None
    state: SlotState = SlotState.LOADING
    reason: str = ""
    runtime: Runtime | None = None
    lm: CausalLM | None = None
    """A causal-LM version's generation engine (format ``causal_lm``), instead of a runtime."""
    adapter: int = 0
    """A LoRA adapter version: its id in ``lm``, the engine of the base version it runs over
    (shared, not its own); 0 for a model."""
    base: str = ""
    """A LoRA adapter version: its base version's key."""
    memory_bytes: int = 0
    """What it holds in the node's memory, measured at load (``LoadedVersion.memory_bytes``)."""
    pinned: bool = False
    """Loaded for a placement in the registry: never evicted to make room."""
    no_room: bool = False
    """FAILED only for want of memory: its placement is tried again as room frees."""
    awaits_base: str = ""
    """FAILED only because this adapter's base version (this key) was not serving: its
    placement is tried again once the base serves."""
    last_used: float = field(default_factory=time.monotonic)
    """When it last began a batch or a generation (or was created): eviction goes by it."""
    in_flight: int = 0
    idle: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.idle.set()

    @property
    def key(self) -> str:
        """``model:version``, also the version's grpc.health service name."""
        return f"{self.spec.model}:{self.spec.version}"

    def move(self, target: SlotState, reason: str = "") -> None:
        if target not in _TRANSITIONS[self.state]:
            raise SlotTransitionError(f"{self.key}: {self.state} cannot become {target}")
        self.state = target
        self.reason = reason

    def begin(self) -> None:
        self.last_used = time.monotonic()
        self.in_flight += 1
        self.idle.clear()

    def end(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            self.idle.set()

    def to_proto(self, settle_s: float = 0.0) -> node_pb2.LoadedVersion:
        held = self.held(time.monotonic(), settle_s)
        loaded = node_pb2.LoadedVersion(
            model=self.spec.model,
            version=self.spec.version,
            state=self.state.to_proto(),
            reason=self.reason,
            max_batch_size=self.spec.max_batch_size,
            profile=self.profile.to_proto(),
            in_flight=self.in_flight,
            memory_bytes=self.memory_bytes,
            pinned=self.pinned,
            evictable=held.evictable,
        )
        set_seconds(loaded.idle_for, held.idle_s)
        return loaded

    def idle_s(self, now: float | None = None) -> float:
        """Seconds since it last began work; 0 while it runs something."""
        if self.in_flight:
            return 0.0
        return max(0.0, (time.monotonic() if now is None else now) - self.last_used)

    def held(self, now: float, settle_s: float = 0.0) -> Held:
        """What the placement policy sees of it: busy (not evictable) while it loads or
        runs something, or until it has been idle ``settle_s``."""
        idle = self.idle_s(now)
        busy = self.in_flight > 0 or self.state != SlotState.SERVING or idle < settle_s
        return Held(self.key, self.memory_bytes, idle, self.pinned, busy)
