"""Sharing node time between tenants: virtual time over estimated compute (fair queueing).

Every tenant has a virtual clock that advances by the compute its dispatched work is
estimated to cost (seconds, from the latency predictor), divided by its weight. Work
is ordered by the virtual time at which it would start (start-time fair queueing),
so a tenant with a deep backlog waits its turn behind a tenant that has used less,
and a tenant back from idle starts at the system's virtual time: it cannot bank
credit while away. Request priority and deadlines order a tenant's own work; they
do not buy a larger share (a tenant sets them itself).

Fair order inside one queue cannot help a tenant whose work is in another queue
(another model or parameter set), so node slots are shared by the same clock: when
more tenants wait (in any queue sharing a replica) than slots are free, the free
slots go to the waiting tenants whose next batches finish earliest in virtual time. And while several
tenants are active, each may hold only its weighted share of a replica's in-flight
slots (at least one), and the last free slot of a replica is kept for an active tenant
that has nothing queued and no slot there: batches are not preempted, so without it a
tenant sending short requests now and then would find every slot held by others' long
batches and wait for one to finish, however early its virtual time.

The ledger is per batcher process: several batcher replicas each share fairly what
passes through them.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ferryman_server.kernel.scopes import is_background
from ferryman_server.registry.validation import MAX_WEIGHT, MIN_WEIGHT

DEFAULT_WEIGHT = 1.0


class Work(Protocol):
    """What fair ordering reads of a queued item."""

    @property
    def tenant(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def arrival(self) -> float: ...
    @property
    def deadline(self) -> float: ...
    @property
    def rows(self) -> int: ...


@dataclass(frozen=True)
class FairView:
    """A snapshot of the ledger for one decision."""

    start: Mapping[str, float] = field(default_factory=dict)
    """Each known tenant's virtual finish time so far."""
    floor: float = 0.0
    """The system's virtual time: where a tenant back from idle starts."""
    weights: Mapping[str, float] = field(default_factory=dict)
    blocked: frozenset[str] = frozenset()
    """Tenants holding their share of node slots: their items wait for a slot of theirs."""

    def tag(self, tenant: str) -> float:
        return max(self.start.get(tenant, self.floor), self.floor)

    def weight(self, tenant: str) -> float:
        return self.weights.get(tenant, DEFAULT_WEIGHT)


def aged_priority(item: Work, now: float, aging_s: float) -> int:
    """The item's priority class plus one class per ``aging_s`` waited (nothing starves)."""
    waited = max(0.0, now - item.arrival)
    return item.priority + (math.floor(waited / aging_s) if aging_s > 0 else 0)


def fair_order(
    items: Sequence[Work],
    indices: Iterable[int],
    now: float,
    aging_s: float,
    row_cost_s: float,
    view: FairView,
) -> list[int]:
    """Indices by virtual start time; within one tenant by aged priority, deadline, arrival.

    Each tenant's items are lined up in its own order and given consecutive virtual
    start times, from the tenant's current tag, each item advancing it by its rows
    times ``row_cost_s`` over the tenant's weight. Ties (equal start times, e.g. one
    tenant) fall back to earliest deadline, then arrival.
    """
    by_tenant: dict[str, list[int]] = defaultdict(list)
    for i in indices:
        by_tenant[items[i].tenant].append(i)
    tags: dict[int, float] = {}
    for tenant, mine in by_tenant.items():
        mine.sort(key=lambda i: (-aged_priority(items[i], now, aging_s), items[i].deadline, items[i].arrival))
        virtual = view.tag(tenant)
        weight = view.weight(tenant)
        for i in mine:
            tags[i] = virtual
            virtual += items[i].rows * row_cost_s / weight
    return sorted(tags, key=lambda i: (tags[i], items[i].deadline, items[i].arrival))


def slot_share(limit: int, weight: float, active_weight: float) -> int:
    """Slots of ``limit`` a tenant of ``weight`` may hold while tenants of ``active_weight``
    (itself included) are active: its weighted share, at least one."""
    if active_weight <= 0:
        return limit
    return max(1, min(limit, math.floor(limit * weight / active_weight)))


def rows_ahead(queued: Mapping[str, int], tenant: str, rows: int, weight: Callable[[str], float]) -> int:
    """Queued rows fair order runs before a new item of ``tenant`` with ``rows`` rows:
    the tenant's own queue, and of every other tenant at most as much as the tenant's
    own work (with the item) in proportion to their weights."""
    mine = queued.get(tenant, 0)
    budget = (mine + rows) / weight(tenant)
    others = sum(min(q, math.ceil(budget * weight(t))) for t, q in queued.items() if t != tenant)
    return mine + others


@dataclass(frozen=True)
class SlotPolicy:
    """Which tenant may claim a batch slot on a replica, now."""

    limit: int
    """Batch slots per replica."""
    caps: Mapping[str, int] = field(default_factory=dict)
    """Slots a tenant may hold per replica (its weighted share; absent: ``limit``)."""
    idle: frozenset[str] = frozenset()
    """Active tenants with nothing queued: the next arrival is likely theirs."""
    contended: bool = False
    """A tenant's work waits for these replicas."""
    long: bool = False
    """The batch to place is long work (``long_batch_s``): it leaves a replica's last free
    slot to short work, so a short call waits at most a short batch."""

    def allows(self, tenant: str, held: Mapping[str, int], inflight: int) -> bool:
        """Whether ``tenant`` may take a slot on a replica with ``inflight`` batches, held
        by tenant as ``held``.

        Beyond its cap, the last free slot of several is kept for an idle active tenant
        holding none there, and from long work whoever is active: batches are not preempted,
        so a tenant that sends short requests now and then would otherwise wait for
        someone's long batch to finish, every time. Tenants
        that are waiting compete for free slots by virtual time instead (``outranked``).
        """
        if inflight >= self.limit or held.get(tenant, 0) >= self.caps.get(tenant, self.limit):
            return False
        if self.long and inflight >= self.limit - 1 and self.limit > 1:
            return False  # batches are not preempted: one slot stays for work that ends soon
        if is_background(tenant):
            # Leftover capacity only: no tenant waiting, and (of several) the last slot kept
            # for the next tenant to arrive. A node's only slot is taken when idle.
            return not self.contended and (inflight < self.limit - 1 or self.limit == 1)
        if inflight < self.limit - 1 or self.limit == 1:
            return True  # a node's only slot is never held idle: that would stop it for everyone
        return not any(u != tenant and held.get(u, 0) == 0 for u in self.idle)


def outranked(free_slots: int, waiting: Mapping[str, tuple[float, float]]) -> frozenset[str]:
    """Tenants (of ``waiting``: tenant -> virtual start and finish time of its next batch)
    that must leave the free slots to others: when more tenants wait than slots are free,
    only the ``free_slots`` whose next batches finish earliest in virtual time may take one
    (weighted fair queueing's order; then by start, then by name, so every queue agrees).

    By finish, not start: a tenant back from idle and one that left the kept slot to it
    both start near the system's virtual time, and ordered by start the long batch would
    win half the time, leaving the short request to wait the whole batch out. By finish,
    the short request goes first and delays the long batch by its own few milliseconds;
    a tenant still gets no more than its share, as its finish times grow with its use."""
    if len(waiting) <= free_slots:
        return frozenset()
    ranked = sorted(waiting, key=lambda t: (waiting[t][1], waiting[t][0], t))
    return frozenset(ranked[max(0, free_slots) :])


def batch_owner(rows_by_tenant: Mapping[str, int]) -> str:
    """The tenant a batch's node slot counts against: the one with most rows in it."""
    return max(sorted(rows_by_tenant), key=lambda t: rows_by_tenant[t]) if rows_by_tenant else ""


class FairShare:
    """The batcher's ledger of tenant virtual times and recent activity."""

    def __init__(self, active_window_s: float, weights: Mapping[str, float] | None = None) -> None:
        self._active_window_s = active_window_s
        self.weights: dict[str, float] = dict(weights or {})
        self._finish: dict[str, float] = {}
        self._virtual = 0.0
        self._seen: dict[str, float] = {}

    @property
    def virtual_time(self) -> float:
        return self._virtual

    def seen(self, tenant: str, now: float, weight: float = DEFAULT_WEIGHT) -> None:
        """The tenant has work (an arrival or a dispatch) at ``now``; ``weight``: its share
        weight as the item said it (0, or out of the registry's bounds: the default)."""
        self._seen[tenant] = now
        self.weights[tenant] = weight if MIN_WEIGHT <= weight <= MAX_WEIGHT else DEFAULT_WEIGHT

    def weight(self, tenant: str) -> float:
        return self.weights.get(tenant, DEFAULT_WEIGHT)

    def view(self, blocked: frozenset[str] = frozenset()) -> FairView:
        return FairView(start=self._finish, floor=self._virtual, weights=self.weights, blocked=blocked)

    def charge(self, costs: Mapping[str, float], now: float) -> None:
        """Dispatched work: advance each tenant's virtual time by its cost over its weight."""
        starts = []
        for tenant, cost in costs.items():
            start = max(self._finish.get(tenant, self._virtual), self._virtual)
            starts.append(start)
            self._finish[tenant] = start + max(0.0, cost) / self.weight(tenant)
            self._seen[tenant] = now
        if starts:
            self._virtual = max(self._virtual, min(starts))
        self._forget(now)

    def active_weight(self, tenant: str, now: float) -> float:
        """Total weight of the tenants active within the window, ``tenant`` included."""
        return sum(self.weight(t) for t in self.active(now) | {tenant})

    def slot_cap(self, tenant: str, limit: int, now: float) -> int:
        return slot_share(limit, self.weight(tenant), self.active_weight(tenant, now))

    def active(self, now: float) -> set[str]:
        """Tenants with work within the window (background scopes are no tenants)."""
        horizon = now - self._active_window_s
        return {t for t, at in self._seen.items() if at >= horizon and not is_background(t)}

    def _forget(self, now: float) -> None:
        """Drop tenants idle past the window whose clock is behind: they would restart
        at the system's virtual time anyway (keeps the ledger as small as the active set)."""
        horizon = now - self._active_window_s
        for tenant in [t for t, at in self._seen.items() if at < horizon]:
            if self._finish.get(tenant, 0.0) <= self._virtual:
                self._finish.pop(tenant, None)
                self.weights.pop(tenant, None)
                del self._seen[tenant]
