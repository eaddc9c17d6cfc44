"""Loads on demand: a version that no node serves is loaded, when a request wants it, on the
node with room (``ferryman_server.kernel.placement.place`` over what the nodes report), evicting
that node's least recently used idle versions when it must. One load per version at a
time; requests wait for it within their own deadlines, and a load that fails is not tried
again for ``demand_retry_s`` (its refusal answers meanwhile), so a broken or oversized
version costs the nodes one attempt, not one per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import grpc

from ferryman.durations import seconds_of
from ferryman.errors import Reason
from ferryman.v1 import node_pb2
from ferryman_server.batcher.metrics import BatcherMetrics
from ferryman_server.batcher.node_client import NODE_INFO_TIMEOUT_S, NodeCallError, NodeClient
from ferryman_server.batcher.settings import BatcherSettings
from ferryman_server.kernel.placement import Held, NodeRoom, Placement, place
from ferryman_server.registry.specs import version_spec
from ferryman_server.registry.tables import ModelVersion

log = logging.getLogger("ferryman.batcher.loads")
MIB = 1 << 20
UNAVAILABLE = grpc.StatusCode.UNAVAILABLE


@dataclass(frozen=True)
class LoadRefusal:
    """Why a version could not be loaded: what its requests are answered meanwhile."""

    code: grpc.StatusCode
    reason: Reason
    message: str
    until: float


def room_of(info: node_pb2.NodeInfoResponse) -> NodeRoom:
    """A node's NodeInfo as the placement policy sees it (failed versions hold nothing)."""
    held = tuple(
        Held(
            key=f"{v.model}:{v.version}",
            bytes=v.memory_bytes,
            idle_s=seconds_of(v.idle_for),
            pinned=v.pinned,
            busy=not v.pinned and not v.evictable,
        )
        for v in info.versions
        if v.state != node_pb2.VERSION_STATE_FAILED
    )
    return NodeRoom(info.name, info.memory_budget or info.memory_total, held)


class LoadTargets(Protocol):
    """What loads on demand need of the replica directory (``ReplicaDirectory``): the versions
    registered, the live nodes by name, and where to say what a node loaded or evicted."""

    @property
    def rows(self) -> Mapping[str, tuple[str, ModelVersion]]:
        """Registered versions by ``model:version``."""
        ...

    @property
    def failures(self) -> Mapping[str, Sequence[tuple[str, str]]]:
        """Versions that failed on some node, with the nodes and why."""
        ...

    @property
    def footprints(self) -> Mapping[str, int]:
        """What each version measured where it loaded."""
        ...

    @property
    def nodes_changed(self) -> asyncio.Event:
        """Set for a moment whenever a node registers or goes."""
        ...

    def nodes(self) -> Mapping[str, NodeClient]:
        """The live nodes by name."""
        ...

    def ready(self, version_key: str) -> Sequence[object]:
        """Where ``version_key`` serves now (empty: nowhere)."""
        ...

    async def note_loaded(self, node: str, key: str) -> None: ...
    def note_evicted(self, node: str, keys: Iterable[str]) -> None: ...


class DemandLoads:
    """The directory's loads on demand (``ReplicaDirectory.loads``)."""

    def __init__(
        self,
        directory: LoadTargets,
        settings: BatcherSettings,
        metrics: BatcherMetrics,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._directory = directory
        self._settings = settings
        self._metrics = metrics
        self._clock = clock
        self._running: dict[str, asyncio.Task[None]] = {}
        self._refused: dict[str, LoadRefusal] = {}
        self._next_more: dict[str, float] = {}
        """When one more replica of a version may next be tried for."""
        self.listeners: list[Callable[[], None]] = []
        """Called when a load ends, either way (queues waiting on it look again)."""

    @property
    def enabled(self) -> bool:
        return self._settings.load_on_demand

    def pending(self, key: str) -> bool:
        return key in self._running

    def refusal(self, key: str) -> LoadRefusal | None:
        """The last load's failure, while it still answers for the version."""
        refused = self._refused.get(key)
        if refused is not None and refused.until <= self._clock():
            del self._refused[key]
            return None
        return refused

    def want(self, key: str, *, more: bool = False) -> bool:
        """Start loading ``key`` unless a load of it runs or failed lately; ``more``: one
        more replica of a version that has some (only where it fits without evicting).
        Whether a load of it is now under way."""
        if not self.enabled or key not in self._directory.rows or self._directory.failures.get(key):
            return False  # a version that failed on a node is answered with why, not retried
        if key in self._running:
            return True
        if not self._directory.nodes() and self._settings.hold_for_node:
            return True  # scaled to zero: the queue's depth wakes a node, then it loads
        if self.refusal(key) is not None or (not more and self._directory.ready(key)):
            return False
        if more:  # at most one attempt per retry period: a full fleet is asked once
            if self._clock() < self._next_more.get(key, 0.0):
                return False
            self._next_more[key] = self._clock() + self._settings.demand_retry_s
        self._running[key] = asyncio.create_task(self._load(key, more))
        return True

    async def wait(self, key: str, timeout_s: float) -> None:
        """Until the load of ``key`` under way ends (or, with no node at all, until one
        registers), or ``timeout_s``."""
        task = self._running.get(key)
        waited = asyncio.shield(task) if task is not None else self._directory.nodes_changed.wait()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(waited, max(0.0, timeout_s))

    async def _load(self, key: str, more: bool) -> None:
        try:
            await self._place(key, more)
        except Exception as exc:  # a load must never take the batcher down
            log.exception("load on demand of %s failed", key)
            self._refuse(key, UNAVAILABLE, Reason.NO_REPLICA, f"loading {key} failed: {exc}")
        finally:
            del self._running[key]
            for listener in self.listeners:
                listener()

    async def _rooms(self) -> list[tuple[NodeClient, NodeRoom]]:
        """Every live node's memory, asked now (a node that does not answer is passed over)."""
        nodes = list(self._directory.nodes().values())
        infos = await asyncio.gather(
            *(node.node_info(NODE_INFO_TIMEOUT_S) for node in nodes), return_exceptions=True
        )
        return [
            (node, room_of(info))
            for node, info in zip(nodes, infos, strict=True)
            if isinstance(info, node_pb2.NodeInfoResponse) and info.lifecycle == "READY"
        ]

    async def _place(self, key: str, more: bool) -> None:
        rooms = await self._rooms()
        if not rooms:
            self._refuse(key, UNAVAILABLE, Reason.NO_REPLICA, f"no ready node to load {key} on")
            return
        measured = [h.bytes for _, room in rooms for h in room.held if h.key == key]
        need = max([self._directory.footprints.get(key, 0), *measured])
        model, _, version = key.partition(":")
        labels = {"model": model, "version": version}
        # Each round either learns the real need (a node that counted more than expected)
        # or rules a node out, so this ends.
        for _ in range(2 * len(rooms) + 1):
            decision = self._decide(rooms, key, need, more)
            if decision is None:
                break
            name = decision.node
            node = next(n for n, room in rooms if room.name == name)
            evict = bool(decision.evict)
            answer = await self._load_on(name, node, key, need, evict=evict)
            if answer is None:
                return
            self._directory.note_evicted(name, answer.evicted)
            if answer.state == node_pb2.VERSION_STATE_SERVING:
                self._metrics.demand_loads.labels(**labels, outcome="loaded").inc()
                await self._directory.note_loaded(name, key)
                log.info("loaded %s on %s on demand (evicted: %s)", key, name, list(answer.evicted))
                return
            if not answer.no_room:
                self._metrics.demand_loads.labels(**labels, outcome="failed").inc()
                self._refuse(key, UNAVAILABLE, Reason.NO_REPLICA, f"{name}: {answer.reason}")
                return
            if answer.memory_bytes > need:  # decide again, knowing what it needs
                need = answer.memory_bytes
            else:  # that node has less room than it reported: the others may have some
                rooms = [(n, room) for n, room in rooms if room.name != name]
        self._metrics.demand_loads.labels(**labels, outcome="no_room").inc()
        if not more:
            self._refuse(
                key,
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                Reason.NO_ROOM,
                f"no node has room for {key}"
                + (f" ({need / MIB:,.0f} MiB)" if need else "")
                + ", even after evicting the idle versions nothing pins",
            )

    @staticmethod
    def _decide(
        rooms: list[tuple[NodeClient, NodeRoom]], key: str, need: int, more: bool
    ) -> Placement | None:
        """Where: a node already loading ``key`` (a placement, another batcher's load) is
        waited on, not doubled; else the policy's choice."""
        if not more:
            for _, room in rooms:
                if room.holds(key):
                    return Placement(room.name)
        decision = place([room for _, room in rooms], key, need)
        if decision is not None and more and decision.evict:
            return None  # one more replica never pushes another version out
        return decision

    async def _load_on(
        self, name: str, node: NodeClient, key: str, need: int, *, evict: bool
    ) -> node_pb2.LoadModelResponse | None:
        spec = version_spec(*self._directory.rows[key])
        request = node_pb2.LoadModelRequest(spec=spec, memory_bytes=need, evict=evict)
        try:
            answer = await node.load_model(request, self._settings.demand_load_timeout_s)
        except NodeCallError as exc:
            self._refuse(key, UNAVAILABLE, Reason.NO_REPLICA, f"{name}: {exc.details}")
            return None
        return answer

    def _refuse(self, key: str, code: grpc.StatusCode, reason: Reason, message: str) -> None:
        log.warning("load on demand of %s refused: %s", key, message)
        self._refused[key] = LoadRefusal(code, reason, message, self._clock() + self._settings.demand_retry_s)
