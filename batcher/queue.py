"""One queue per (version, parameters): its items, its scheduler loop, its estimates."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from datetime import timedelta

import grpc

from ferryman.errors import Reason, make_status
from ferryman.v1 import batcher_pb2
from ferryman_server.batcher.admission import Refusal
from ferryman_server.batcher.dispatcher import Dispatcher, owner_of
from ferryman_server.batcher.entries import Entry, Finisher, QueueKey
from ferryman_server.batcher.fairness import FairShare, FairView, SlotPolicy, outranked, rows_ahead
from ferryman_server.batcher.metrics import BatcherMetrics
from ferryman_server.batcher.predictor import LatencyPredictor
from ferryman_server.batcher.rate import RateMeter
from ferryman_server.batcher.replicas import ReplicaDirectory
from ferryman_server.batcher.scheduler import DispatchReason, Load, SchedulerConfig, decide, row_cost
from ferryman_server.batcher.settings import BatcherSettings
from ferryman_server.kernel.scopes import is_background
from ferryman_server.kernel.telemetry import exemplar


class VersionQueue:
    """Holds entries and runs the scheduler loop that dispatches them."""

    def __init__(
        self,
        key: QueueKey,
        config: SchedulerConfig,
        settings: BatcherSettings,
        directory: ReplicaDirectory,
        dispatcher: Dispatcher,
        metrics: BatcherMetrics,
        finish: Finisher,
        wake: Callable[[bool], None],
        contenders: Callable[[str], dict[str, float]],
        fair: FairShare,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.key = key
        self.model, self.version, params = key
        self.parameters = dict(params)
        self.config = config
        self.entries: list[Entry] = []
        """Queued entries in arrival order (filtering keeps the order)."""
        self._rows = 0
        self._tenant_rows: dict[str, int] = {}
        self.predictor = LatencyPredictor(
            default_s=settings.default_batch_latency_s, smoothing=settings.predictor_smoothing
        )
        self.arrivals = RateMeter(tau_s=settings.rate_window_s)
        self.drained = RateMeter(tau_s=settings.rate_window_s)
        self.last_decision_window = 0.0
        self.last_target_rows = 1
        self.draining = False
        self._seeded = False
        self._directory = directory
        self._dispatcher = dispatcher
        self._metrics = metrics
        self._finish = finish
        self._wake = wake
        """Wakes other queues: every one with work when a slot frees (replicas are shared by
        all queues, so the slot may be the one another waits for), or only those that left
        the free slots to a tenant ahead of theirs when a dispatch changes who is ahead."""
        self._contenders = contenders
        """Tenants with queued work in any queue sharing a replica with a version, each
        with the compute its next batch there is predicted to cost (``next_batch_costs``)."""
        self._fair = fair
        self.deferred = False
        """The last decision left a free slot to another queue's tenant."""
        self._clock = clock
        self._retry_wait_s = settings.retry_backoff_s
        self._long_batch_s = settings.long_batch_s
        self._scale_out_after_s = settings.scale_out_after_s
        self._wakeup = asyncio.Event()
        self._running: set[asyncio.Task[None]] = set()
        self._labels = {"model": self.model, "version": self.version}
        # Children looked up once: labels() validates its arguments on every call.
        self._depth = metrics.queue_depth.labels(**self._labels)
        self._waited = metrics.queue_wait.labels(**self._labels)

    @property
    def version_key(self) -> str:
        return f"{self.model}:{self.version}"

    @property
    def rows(self) -> int:
        return self._rows

    @property
    def busy(self) -> bool:
        return bool(self.entries or self._running)

    def expected_latency(self, rows: int, replicas: int, tenant: str) -> float:
        """Predicted time until a new item of ``tenant`` with ``rows`` rows is answered.

        The rows fair order puts ahead of it run first, in full batches ``replicas`` at
        a time; then it waits at most the current window and runs in a batch with the
        remainder.
        """
        full = self.config.max_batch_rows
        before = rows_ahead(self._tenant_rows, tenant, rows, self._fair.weight)
        ahead = before // full
        own_batch = min(before % full + rows, full)
        return (
            ahead * self.predictor.predict(full) / max(1, replicas)
            + self.last_decision_window
            + self.predictor.predict(own_batch)
        )

    def add(self, entry: Entry) -> None:
        self.entries.append(entry)
        self._rows += entry.rows
        self._tenant_rows[entry.tenant] = self._tenant_rows.get(entry.tenant, 0) + entry.rows
        self.arrivals.add(entry.rows, self._clock())
        self._depth.set(self.rows)
        self._wakeup.set()

    def remove(self, entry: Entry) -> None:
        """Drop a not-yet-dispatched entry (its last caller left)."""
        if entry in self.entries:
            self.entries.remove(entry)
            self._rows -= entry.rows
            self._count_tenant_rows()
            self._depth.set(self.rows)
            self._wakeup.set()

    def next_batch_costs(self) -> dict[str, float]:
        """Each waiting tenant's next batch here (its rows, up to a full batch), in
        predicted compute seconds: the fair-share cost unit."""
        per_row = row_cost(self.predictor, self.config.max_batch_rows)
        limit = self.config.max_batch_rows
        return {tenant: min(rows, limit) * per_row for tenant, rows in self._tenant_rows.items()}

    def _count_tenant_rows(self) -> None:
        self._tenant_rows.clear()
        for entry in self.entries:
            self._tenant_rows[entry.tenant] = self._tenant_rows.get(entry.tenant, 0) + entry.rows

    def poke(self) -> None:
        self._wakeup.set()

    async def run(self) -> None:
        """The scheduler loop: decide, act, sleep until the next deadline or event."""
        while True:
            self._wakeup.clear()
            timeout = self._step()
            if timeout == 0.0:
                continue
            # asyncio.timeout, not wait_for: no task per wakeup (one per arriving item).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wakeup.wait()
            # Items come in bursts (callers answered by one batch send again together): let
            # the rest of the burst land first, and decide once for all of it.
            await asyncio.sleep(0)

    def _step(self) -> float | None:
        """One decision; returns how long to sleep (None: until an event, 0: decide again)."""
        if not self.entries:
            return None
        if not self._seeded:
            profile = self._directory.profile(self.version_key)
            if profile:
                self.predictor.seed(profile)
                self._seeded = True
        now = self._clock()
        capacity = self._directory.capacity(self.version_key)
        if capacity.total_slots == 0 and not self._directory.ready(self.version_key):
            unserved = self._directory.unserved(self.version_key)
            if unserved is None:  # loading on demand: the load's end wakes this queue
                return self._expire_late(now)
            self._fail_all(unserved)
            return None
        load = Load(
            free_slots=capacity.free_slots,
            total_slots=capacity.total_slots,
            replicas=capacity.replicas,
            idle_replicas=capacity.idle_replicas,
            arrival_rate=self.arrivals.rate(now),
        )
        fair, policy = self._fair_view(capacity.free_slots, now)
        scale_out_in = self._scale_out(capacity.free_slots, now)
        if not self.draining and (capacity.free_slots <= 0 or self._tenant_rows.keys() <= fair.blocked):
            # Nobody queued here may take a slot: a full decision (every item ordered and
            # priced) would dispatch nothing. Sleep until a slot frees (the dispatcher wakes
            # every queue), the most urgent item could no longer be run in time, or its
            # wait asks for one more replica.
            late_in = self._expire_late(now)
            if scale_out_in is None or late_in is None:
                return late_in
            return min(late_in, scale_out_in)
        decision = decide(now, self.entries, self.config, self.predictor, load, self.draining, fair)
        self.last_decision_window, self.last_target_rows = decision.window_s, decision.target_rows
        for index in decision.expired:
            self._expire(self.entries[index], now)
        dispatched: list[int] = []
        blocked = False
        if decision.batch:
            batch = [self.entries[i] for i in decision.batch]
            if self._dispatch(batch, decision.reason, now, policy):
                dispatched = decision.batch
            else:
                blocked = True
        gone = set(decision.expired) | set(dispatched)
        if gone:
            self._forget([self.entries[i] for i in gone])
        if dispatched:
            return 0.0
        if blocked:
            # No slot could be claimed (a breaker refused at the last moment): look again soon.
            return self._retry_wait_s
        if decision.wake_at is None:
            return None
        return max(0.0, decision.wake_at - now)

    def _scale_out(self, free_slots: int, now: float) -> float | None:
        """With every slot taken, ask for one more replica once the oldest item has waited
        ``scale_out_after_s``; returns the seconds until it will have (None: not now)."""
        if free_slots > 0 or not self._scale_out_after_s or not self.entries:
            return None
        left = self._scale_out_after_s - (now - self.entries[0].arrival)
        if left > 0:
            return left
        self._directory.loads.want(self.version_key, more=True)
        return None

    def _expire_late(self, now: float) -> float | None:
        """Fail the items that can no longer be run in time (as ``decide`` would); returns
        the seconds until the next one would become so (None: nothing is left queued)."""
        due = [(e.deadline - self.predictor.predict(e.rows), e) for e in self.entries]
        late = [e for at, e in due if at <= now]
        if late:
            for entry in late:
                self._expire(entry, now)
            self._forget(late)
        waits = [at - now for at, _ in due if at > now]
        return min(waits) if waits else None

    def _forget(self, gone: list[Entry]) -> None:
        """Take ``gone`` (dispatched or failed) out of the queue and its counts."""
        ids = set(map(id, gone))
        self.entries = [e for e in self.entries if id(e) not in ids]
        self._rows = sum(e.rows for e in self.entries)
        self._count_tenant_rows()
        self._depth.set(self.rows)

    def _fair_view(self, free_slots: int, now: float) -> tuple[FairView, SlotPolicy]:
        """The ledger's view with the tenants that may not take a slot now (the slot
        policy refuses them, or tenants whose next batches finish earlier wait for the free
        slots), and the slot policy."""
        limit = self._directory.slots_per_replica(self.version_key)
        costs = self._contenders(self.version_key)
        tenants = costs.keys() | self._tenant_rows.keys()
        background = {t for t in tenants if is_background(t)}
        policy = SlotPolicy(
            limit=limit,
            caps={t: self._fair.slot_cap(t, limit, now) for t in tenants},
            idle=frozenset(self._fair.active(now) - tenants),
            contended=bool(tenants - background),
            long=self._long_batch_s is not None and self.predictor.predict(1) > self._long_batch_s,
        )
        blocked = self._directory.blocked(self.version_key, policy, tenants)
        ledger = self._fair.view()
        behind = outranked(
            free_slots,
            {
                t: (ledger.tag(t), ledger.tag(t) + costs.get(t, 0.0) / ledger.weight(t))
                for t in tenants - blocked - background
            },
        )
        deferred, self.deferred = self.deferred, bool(behind & self._tenant_rows.keys())
        if self.deferred and not deferred:
            # The free slot is left to a tenant queued elsewhere, whose queue may be asleep
            # (its tenant was refused the slot kept for ours, which just arrived): wake it.
            self._wake(False)
        return self._fair.view(blocked | behind), policy

    def _dispatch(
        self, batch: list[Entry], reason: DispatchReason | None, now: float, policy: SlotPolicy
    ) -> bool:
        """Send ``batch`` if a replica slot can be claimed; False leaves it queued."""
        rows = sum(e.rows for e in batch)
        owner = owner_of(batch)
        replica = self._dispatcher.reserve(self.version_key, rows, owner, policy=policy)
        if replica is None:
            return False
        costs: dict[str, float] = {}
        per_row = row_cost(self.predictor, self.config.max_batch_rows)
        for entry in batch:
            costs[entry.tenant] = costs.get(entry.tenant, 0.0) + entry.rows * per_row
        self._fair.charge(costs, now)
        self._wake(True)  # free slots and virtual times moved: a deferred queue may be ahead now
        for entry in batch:
            entry.dispatched = True
            first = next((w.span for w in entry.waiters if w.span is not None), None)
            self._waited.observe(now - entry.arrival, exemplar(first) if first is not None else None)
            for waiter in entry.waiters:
                if waiter.span is not None:
                    waiter.span.set_attribute(
                        "ferryman.dispatch_reason", (reason or DispatchReason.WINDOW).value
                    )
                waiter.end_wait()
        # The batch size's exemplar: one request of the batch (its trace links to the batch).
        first = next((w.span for e in batch for w in e.waiters if w.span is not None), None)
        self._metrics.batch_size.labels(**self._labels).observe(rows, exemplar(first) if first else None)
        self._metrics.batch_fill_ratio.labels(**self._labels).observe(rows / self.config.max_batch_rows)
        self._metrics.dispatches.labels(**self._labels, reason=(reason or DispatchReason.WINDOW).value).inc()
        self.drained.add(rows, now)
        task = asyncio.create_task(
            self._dispatcher.dispatch(
                self.model, self.version, self.parameters, batch, self.predictor, replica
            )
        )
        self._running.add(task)
        task.add_done_callback(self._batch_done)
        return True

    def _batch_done(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        self._wake(False)  # a slot is free again, for this queue or another

    def _expire(self, entry: Entry, now: float) -> None:
        left_ms = (entry.deadline - now) * 1000
        predicted_ms = self.predictor.predict(entry.rows) * 1000
        self._metrics.shed.labels(**self._labels, reason="deadline").inc()
        status = make_status(
            grpc.StatusCode.DEADLINE_EXCEEDED,
            f"cannot meet the deadline: {left_ms:.1f} ms left, a batch takes {predicted_ms:.1f} ms",
            reason=Reason.DEADLINE_UNMEETABLE,
        )
        self._finish(entry, batcher_pb2.ItemResult(status=status))

    def _fail_all(self, refusal: Refusal) -> None:
        retry_after = None if refusal.retry_after_s is None else timedelta(seconds=refusal.retry_after_s)
        status = make_status(refusal.code, refusal.message, reason=refusal.reason, retry_after=retry_after)
        entries, self.entries, self._rows = self.entries, [], 0
        self._tenant_rows.clear()
        for entry in entries:
            self._metrics.shed.labels(**self._labels, reason=refusal.reason.lower()).inc()
            self._finish(entry, batcher_pb2.ItemResult(status=status))
        self._depth.set(0)

    async def wait_idle(self) -> None:
        while self.busy:
            self._wakeup.set()
            await asyncio.sleep(self.config.slack_margin_s or 0.001)
