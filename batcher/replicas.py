"""Which nodes serve which version, and each version's batching config, from the registry.

Refreshed in the background; when the registry cannot be read the last good copy
keeps serving. A replica is READY when its node is READY in the registry, its
heartbeat is fresh and it reports the version loaded; the breaker and the in-flight
limit then decide whether it takes the next batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import grpc

from ferryman.durations import seconds_of
from ferryman.errors import Reason
from ferryman_server.batcher.admission import Refusal
from ferryman_server.batcher.breaker import Breaker, BreakerState
from ferryman_server.batcher.fairness import SlotPolicy
from ferryman_server.batcher.loads import DemandLoads
from ferryman_server.batcher.metrics import BatcherMetrics
from ferryman_server.batcher.node_client import (
    NODE_INFO_TIMEOUT_S,
    GrpcNodeClient,
    NodeCallError,
    NodeClient,
    NodeConnector,
)
from ferryman_server.batcher.scheduler import Capacity
from ferryman_server.batcher.settings import BatcherSettings
from ferryman_server.kernel.security import Security
from ferryman_server.registry.snapshot import NodeVersions
from ferryman_server.registry.tables import ModelVersion

log = logging.getLogger("ferryman.batcher.replicas")
UNKNOWN_CAPACITY_SLOTS = 1
"""Batch slots on a node whose capacity is not known (its NodeInfo failed)."""


@dataclass(frozen=True)
class VersionConfig:
    max_batch_size: int
    max_queue_delay_s: float
    shareable: bool
    cacheable: bool


@dataclass(eq=False)
class Replica:
    name: str
    address: str
    node: NodeClient
    breaker: Breaker
    versions: frozenset[str] = frozenset()
    inflight: int = 0
    outstanding_rows: int = 0
    tenant_slots: dict[str, int] = field(default_factory=dict)
    """In-flight batches by the tenant each counts against
    (``ferryman_server.batcher.fairness.batch_owner``)."""
    profiles: dict[str, dict[int, float]] = field(default_factory=dict)
    generations: int = 0
    """Generation streams running through this batcher to the node."""
    capacity: int = 0
    """Batches the node says it computes at once (0: not known yet)."""
    device: str = ""
    """The node's device as it reports it (``cpu``, ``cuda:0``; empty: not known yet)."""

    def claim(self, rows: int, owner: str) -> None:
        """Take a batch slot of ``rows`` for ``owner`` (the tenant it counts against), as a
        batch is sent; its breaker counts the call."""
        self.inflight += 1
        self.outstanding_rows += rows
        self.tenant_slots[owner] = self.tenant_slots.get(owner, 0) + 1
        self.breaker.on_call()

    def release(self, rows: int, owner: str) -> None:
        """Give back a slot ``claim`` took, once its batch is answered or has failed."""
        self.inflight -= 1
        self.outstanding_rows -= rows
        held = self.tenant_slots.get(owner, 0) - 1
        if held > 0:
            self.tenant_slots[owner] = held
        else:
            self.tenant_slots.pop(owner, None)

    def begin_generation(self) -> None:
        """A generation stream starts through this replica; its breaker counts the call."""
        self.generations += 1
        self.breaker.on_call()

    def end_generation(self) -> None:
        self.generations -= 1


class ReplicaChoice(Protocol):
    """Which of the replicas that can take a batch gets it."""

    def choose(self, candidates: Sequence[Replica]) -> Replica: ...


class PowerOfTwoChoices:
    """Two candidates at random, the one with fewer outstanding rows: near-best balance
    without the herd that always picking the least loaded causes between batchers."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()

    def choose(self, candidates: Sequence[Replica]) -> Replica:
        if len(candidates) == 1:
            return candidates[0]
        a, b = self._rng.sample(list(candidates), 2)
        return a if a.outstanding_rows <= b.outstanding_rows else b


MAX_REASON_CHARS = 300
"""Of a node's failure reason repeated in a caller's error."""


class ReplicaSource(Protocol):
    """What the directory reads of the registry (``ferryman_server.registry.reader.RegistryReader``)."""

    def revision(self) -> int: ...
    def all_versions(self) -> list[tuple[str, ModelVersion]]: ...
    def node_versions(self, heartbeat_timeout_s: float) -> NodeVersions: ...


class ReplicaDirectory:
    """Replicas and version configs, refreshed from the registry."""

    def __init__(
        self,
        settings: BatcherSettings,
        reader: ReplicaSource,
        metrics: BatcherMetrics,
        security: Security,
        *,
        refresh_s: float,
        heartbeat_timeout_s: float,
        clock: Callable[[], float] = time.monotonic,
        choice: ReplicaChoice | None = None,
        connect: NodeConnector | None = None,
    ) -> None:
        self._settings = settings
        self._reader = reader
        self._metrics = metrics
        self._connect_node: NodeConnector = connect or (
            lambda address: GrpcNodeClient(address, security, settings.max_message_bytes)
        )
        self._clock = clock
        self._choice = choice or PowerOfTwoChoices()
        self._refresh_s = refresh_s
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.replicas: dict[str, Replica] = {}
        self.failures: dict[str, list[tuple[str, str]]] = {}
        """``model:version`` -> [(node, why)] where it failed (from the nodes' heartbeats)."""
        self.versions: dict[str, VersionConfig] = {}
        self.footprints: dict[str, int] = {}
        """Bytes each version measured where a node last reported it: a load's expectation."""
        self.rows: dict[str, tuple[str, ModelVersion]] = {}
        """Each version's registry row (a load on demand builds its spec from it)."""
        self._revision = -1
        self.refreshed = asyncio.Event()
        self.loads = DemandLoads(self, settings, metrics, clock)
        self.nodes_changed = asyncio.Event()
        """Set (and cleared again) when a node joins: requests held for one look again."""
        self._recent: dict[tuple[str, str], tuple[bool, float]] = {}
        """(node, version) -> (whether it serves there, until when): what a load on demand
        changed, which the registry learns only from the node's next heartbeat."""

    async def refresh(self) -> None:
        """Read nodes (always) and versions (when the config revision moved)."""
        revision = await asyncio.to_thread(self._reader.revision)
        if revision != self._revision:
            rows = await asyncio.to_thread(self._reader.all_versions)
            self.versions = {
                f"{model}:{row.version}": VersionConfig(
                    max_batch_size=row.max_batch_size,
                    max_queue_delay_s=row.max_queue_delay_ms / 1000,
                    shareable=row.shareable,
                    cacheable=row.cacheable,
                )
                for model, row in rows
            }
            self.rows = {f"{model}:{row.version}": (model, row) for model, row in rows}
            self._revision = revision
        nodes = await asyncio.to_thread(self._reader.node_versions, self.heartbeat_timeout_s)
        ready, self.failures = nodes.ready, nodes.failed
        serving: dict[tuple[str, str], set[str]] = {}
        for version_key, holders in ready.items():
            for name, address in holders:
                serving.setdefault((name, address), set()).add(version_key)
        live: dict[str, tuple[str, frozenset[str]]] = {
            name: (address, frozenset()) for name, address in nodes.nodes.items()
        }
        live.update({name: (address, frozenset(keys)) for (name, address), keys in serving.items()})
        for name in list(self.replicas):
            if name not in live or live[name][0] != self.replicas[name].address:
                gone = self.replicas.pop(name)
                # A batch still running there finishes (or fails over) on its own.
                if gone.inflight == 0:
                    await gone.node.close()
        joined = False
        for name, (address, versions) in live.items():
            replica = self.replicas.get(name)
            if replica is None:
                replica = self._connect(name, address)
                self.replicas[name] = replica
                joined = True
            versions = self._with_recent(name, versions)
            if versions - replica.versions:
                await self._fetch_profiles(replica)
            replica.versions = versions
        if joined:
            self.nodes_changed.set()
            self.nodes_changed.clear()
            for listener in self.loads.listeners:
                listener()
        self.refreshed.set()

    def _with_recent(self, node: str, versions: frozenset[str]) -> frozenset[str]:
        """``versions`` as the registry has them, corrected by loads and evictions too recent
        for the node's heartbeat to have told it."""
        now = self._clock()
        serving = set(versions)
        for (name, key), (present, until) in list(self._recent.items()):
            if until <= now:
                del self._recent[(name, key)]
            elif name == node:
                (serving.add if present else serving.discard)(key)
        return frozenset(serving)

    def nodes(self) -> dict[str, NodeClient]:
        """The live nodes by name (``LoadTargets``)."""
        return {name: replica.node for name, replica in self.replicas.items()}

    async def note_loaded(self, node: str, key: str) -> None:
        """``key`` serves on ``node`` now (loaded on demand): batches may go there."""
        self._recent[(node, key)] = (True, self._clock() + self.heartbeat_timeout_s)
        replica = self.replicas.get(node)
        if replica is None:  # gone while it loaded: its heartbeat will say
            return
        await self._fetch_profiles(replica)
        replica.versions = replica.versions | {key}

    def note_evicted(self, node: str, keys: Iterable[str]) -> None:
        """``keys`` no longer serve on ``node`` (evicted to make room)."""
        for key in keys:
            self._recent[(node, key)] = (False, self._clock() + self.heartbeat_timeout_s)
        replica = self.replicas.get(node)
        if replica is not None:
            replica.versions = replica.versions - set(keys)

    def _connect(self, name: str, address: str) -> Replica:
        breaker = Breaker(
            threshold=self._settings.breaker_threshold, cooldown_s=self._settings.breaker_cooldown_s
        )
        return Replica(name=name, address=address, node=self._connect_node(address), breaker=breaker)

    async def _fetch_profiles(self, replica: Replica) -> None:
        try:
            info = await replica.node.node_info(NODE_INFO_TIMEOUT_S)
        except NodeCallError as exc:
            log.warning("NodeInfo from %s failed: %s", replica.name, exc.details)
            return
        replica.capacity, replica.device = info.capacity, info.device
        for loaded in info.versions:
            key = f"{loaded.model}:{loaded.version}"
            replica.profiles[key] = {p.batch_size: seconds_of(p.latency) for p in loaded.profile}
            if loaded.memory_bytes:
                self.footprints[key] = loaded.memory_bytes

    async def run(self, stop: asyncio.Event) -> None:
        """Refresh until ``stop`` is set; registry errors keep the last good copy."""
        while not stop.is_set():
            try:
                await self.refresh()
            except Exception as exc:
                log.warning("registry refresh failed, serving on the last good copy: %s", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self._refresh_s)

    def ready(self, version_key: str) -> list[Replica]:
        return [r for r in self.replicas.values() if version_key in r.versions]

    def profile(self, version_key: str) -> dict[int, float]:
        """A warm-up profile of the version from any replica that has one."""
        for replica in self.ready(version_key):
            if version_key in replica.profiles:
                return replica.profiles[version_key]
        return {}

    def slots(self, replica: Replica) -> int:
        """Batches ``replica`` may have in flight: the setting, else the node's capacity."""
        return self._settings.max_inflight_per_node or replica.capacity or UNKNOWN_CAPACITY_SLOTS

    def tenant_slots(self, replica: Replica) -> int:
        """Batches one tenant may have in flight on ``replica``: the setting, else one on a
        CPU node (its next batch grows while this one runs, and the node's other slots stay
        free for other tenants) and every slot on a GPU (batches pipeline there)."""
        given = self._settings.max_tenant_inflight_per_node
        if given:
            return given
        return 1 if replica.device == "cpu" else self.slots(replica)

    def _takes(self, replica: Replica, tenant: str, policy: SlotPolicy) -> bool:
        """Whether the policy and the per-tenant limit let ``tenant`` claim a slot on ``replica``."""
        return replica.tenant_slots.get(tenant, 0) < self.tenant_slots(replica) and policy.allows(
            tenant, replica.tenant_slots, replica.inflight
        )

    def no_replica(self, version_key: str) -> str:
        """Why nothing serves ``version_key``: where it failed and why, when a node said so
        ("mlp:2 failed on node-1: warm-up at batch 2 failed: ..."), else that none is ready."""
        failed = self.failures.get(version_key)
        if not failed:
            return f"no ready replica serves {version_key}"
        node, reason = failed[0]
        more = f" (and on {len(failed) - 1} more)" if len(failed) > 1 else ""
        return f"{version_key} failed on {node}{more}: {reason[:MAX_REASON_CHARS]}"

    def unserved(self, version_key: str) -> Refusal | None:
        """Why nothing can serve ``version_key`` now; None when a replica serves it or a load
        of it is under way (started here, on demand, when none is)."""
        if self.ready(version_key) or self.loads.want(version_key):
            return None
        refused = self.loads.refusal(version_key)
        if refused is not None:  # a caller may try again once a load is tried again
            retry_after_s = max(0.0, refused.until - self._clock())
            return Refusal(refused.code, refused.reason, refused.message, retry_after_s=retry_after_s)
        return Refusal(grpc.StatusCode.UNAVAILABLE, Reason.NO_REPLICA, self.no_replica(version_key))

    def slots_per_replica(self, version_key: str) -> int:
        """The most batch slots any replica of the version has."""
        return max((self.slots(r) for r in self.ready(version_key)), default=UNKNOWN_CAPACITY_SLOTS)

    def capacity(self, version_key: str) -> Capacity:
        """Batch slots and replicas across the version's usable replicas."""
        now = self._clock()
        usable = [r for r in self.ready(version_key) if r.breaker.allows(now)]
        return Capacity(
            free_slots=sum(max(0, self.slots(r) - r.inflight) for r in usable),
            total_slots=sum(self.slots(r) for r in usable),
            replicas=len(usable),
            idle_replicas=sum(1 for r in usable if r.inflight == 0),
        )

    def blocked(self, version_key: str, policy: SlotPolicy, tenants: Iterable[str]) -> frozenset[str]:
        """Tenants (of ``tenants``) that no usable replica of the version has a slot for now."""
        now = self._clock()
        usable = [r for r in self.ready(version_key) if r.breaker.allows(now)]
        return frozenset(t for t in tenants if not any(self._takes(r, t, policy) for r in usable))

    def pick(
        self, version_key: str, exclude: set[str], owner: str = "", policy: SlotPolicy | None = None
    ) -> Replica | None:
        """The replica choice among those that can take a batch (and, with ``policy``,
        that it lets ``owner`` claim a slot on)."""
        now = self._clock()
        candidates = [
            r
            for r in self.ready(version_key)
            if r.name not in exclude
            and r.inflight < self.slots(r)
            and r.breaker.allows(now)
            and (policy is None or self._takes(r, owner, policy))
        ]
        return self._choice.choose(candidates) if candidates else None

    def record_breaker(self, replica: Replica) -> None:
        self._metrics.breaker_state.labels(node=replica.name).set(
            0 if replica.breaker.state == BreakerState.CLOSED else 1
        )

    async def close(self) -> None:
        for replica in self.replicas.values():
            await replica.node.close()
