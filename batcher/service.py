"""The batcher's behaviour behind its servicer: admit items, coalesce, queue, fan out."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from datetime import timedelta

import grpc
from google.rpc import status_pb2

from ferryman.durations import seconds_of, set_seconds
from ferryman.errors import EXPECTED_MS, Reason, make_status
from ferryman.v1 import batcher_pb2, common_pb2
from ferryman_server.batcher.admission import QueueLimits, Refusal, check_item, check_queue
from ferryman_server.batcher.cache import TTLCache
from ferryman_server.batcher.coalescer import coalescing_key, input_digest
from ferryman_server.batcher.dispatcher import Dispatcher
from ferryman_server.batcher.entries import Entry, Finisher, QueueKey, Sink, Waiter
from ferryman_server.batcher.fairness import FairShare
from ferryman_server.batcher.metrics import BatcherMetrics
from ferryman_server.batcher.queue import VersionQueue
from ferryman_server.batcher.replicas import ReplicaDirectory, VersionConfig
from ferryman_server.batcher.scheduler import SchedulerConfig
from ferryman_server.batcher.settings import BatcherSettings
from ferryman_server.kernel.scopes import is_background
from ferryman_server.kernel.telemetry import parent_context, tracer

DEADLINE_CODE = grpc.StatusCode.DEADLINE_EXCEEDED.value[0]
DEFAULT_PRIORITY = common_pb2.PRIORITY_NORMAL


def item_rows(item: batcher_pb2.SubmitItem) -> int:
    """Rows an item carries (its first input's item dimension), 0 when it has none."""
    if not item.inputs:
        return 0
    first = item.inputs[0]
    if first.WhichOneof("value") == "text":
        return len(first.text.values)
    return int(first.tensor.shape[0]) if first.tensor.shape else 0


class BatcherService:
    """Admission, coalescing and result fan-out; queues do the scheduling."""

    def __init__(
        self,
        settings: BatcherSettings,
        directory: ReplicaDirectory,
        metrics: BatcherMetrics,
        dispatcher_factory: Callable[[Finisher], Dispatcher],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._settings = settings
        self._directory = directory
        self._metrics = metrics
        self._clock = clock
        self.dispatcher = dispatcher_factory(self.finish)
        self.queues: dict[QueueKey, VersionQueue] = {}
        self.fair = FairShare(active_window_s=settings.fair_active_s)
        self._queue_tasks: dict[QueueKey, asyncio.Task[None]] = {}
        self._inflight: dict[str, Entry] = {}
        # Per Submit stream: its waiting request ids (for cancellation and stream close).
        self._streams: dict[int, dict[str, tuple[Entry, Waiter]]] = {}
        self._cache: TTLCache[batcher_pb2.ItemResult] = TTLCache(
            ttl_s=settings.cache_ttl_s, max_entries=settings.cache_max_entries
        )
        self._statuses: dict[tuple[grpc.StatusCode, str, str], status_pb2.Status] = {}
        self._limits = QueueLimits(
            max_queue_rows=settings.max_queue_rows,
            max_total_rows=settings.max_total_rows,
            retry_after_min_s=settings.retry_after_min_s,
            retry_after_max_s=settings.retry_after_max_s,
        )
        # A load on demand that ends lets the queues waiting on it dispatch (or fail).
        directory.loads.listeners.append(lambda: self._wake(False))
        self.accepting = True
        self.shed_at = -math.inf
        """When a tenant's item was last refused, or ran out of time in a queue (job
        workers pause while tenants are shed)."""
        self._tracer = tracer("ferryman.batcher")

    def pending(self, stream: int) -> int:
        return len(self._streams.get(stream, {}))

    def submit(self, item: batcher_pb2.SubmitItem, sink: Sink, stream: int) -> None:
        """Admit one item; its result (or error) reaches ``sink`` exactly once."""
        now = self._clock()
        labels = {"model": item.model, "version": item.version}

        def refuse(refusal: Refusal) -> None:
            self._metrics.shed.labels(**labels, reason=refusal.reason.lower()).inc()
            if not is_background(item.tenant):
                self.shed_at = now
            sink(batcher_pb2.ItemResult(request_id=item.request_id, status=self._status(refusal)))

        deadline = self._deadline(item, now)
        version_key = f"{item.model}:{item.version}"
        config = self._directory.versions.get(version_key)
        rows = item_rows(item)
        refused = check_item(
            now,
            deadline,
            self.accepting,
            version_key,
            None if config is None else config.max_batch_size,
            rows,
            lambda: self._directory.unserved(version_key),
        )
        if refused is not None:
            return refuse(refused)
        assert config is not None  # check_item refuses an unknown version
        input_hash = input_digest(item.inputs)
        key = coalescing_key(
            model=item.model,
            version=item.version,
            parameters=item.parameters,
            input_hash=input_hash,
            tenant=item.tenant,
            shareable=config.shareable and not item.shadow,
        )
        if config.cacheable and (hit := self._cache.get(key, now)) is not None:
            self._metrics.cache_hits.labels(**labels).inc()
            result = batcher_pb2.ItemResult()
            result.CopyFrom(hit)
            result.request_id, result.cached = item.request_id, True
            return sink(result)
        priority = item.priority or DEFAULT_PRIORITY
        waiter = Waiter(request_id=item.request_id, stream=stream, arrival=now, deadline=deadline, sink=sink)
        waiter.span = self._tracer.start_span(
            "batcher.queue",
            context=parent_context(item.traceparent),
            attributes={
                "ferryman.model": item.model,
                "ferryman.version": item.version,
                "ferryman.rows": rows,
            },
        )
        shared = self._inflight.get(key) if self._settings.coalesce else None
        if shared is not None and len(shared.live_waiters()) < self._settings.max_waiters:
            waiter.coalesced = True
            waiter.span.set_attribute("ferryman.coalesced", True)
            shared.join(waiter, priority)
            self._streams.setdefault(stream, {})[item.request_id] = (shared, waiter)
            self._metrics.coalesced.labels(**labels).inc()
            return None
        queue = self._queue(item, config)
        if queue is None:
            waiter.span.end()
            return refuse(
                Refusal(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    Reason.TOO_MANY_PARAMETER_SETS,
                    f"{version_key} has {self._settings.max_parameter_sets} parameter sets in use",
                    retry_after_s=self._settings.retry_after_min_s,
                )
            )
        refused = check_queue(
            now,
            deadline,
            version_key,
            rows,
            queue.expected_latency(rows, self._directory.capacity(version_key).replicas, item.tenant),
            queue.rows,
            sum(q.rows for q in self.queues.values()),
            queue.drained.rate(now),
            self._limits,
        )
        if refused is not None:
            waiter.span.end()
            return refuse(refused)
        entry = Entry(
            key=key,
            queue=queue.key,
            tenant=item.tenant,
            request_id=item.request_id,
            priority=priority,
            arrival=now,
            deadline=deadline,
            rows=rows,
            inputs=list(item.inputs),
            input_hash=input_hash,
            traceparent=item.traceparent,
            waiters=[waiter],
        )
        self._inflight[key] = entry
        self._streams.setdefault(stream, {})[item.request_id] = (entry, waiter)
        self.fair.seen(item.tenant, now, item.weight)
        queue.add(entry)
        return None

    def _deadline(self, item: batcher_pb2.SubmitItem, now: float) -> float:
        """The item's deadline on our clock: the earlier of its time budget and wall deadline."""
        deadline = now + self._settings.default_timeout_s
        if item.HasField("time_budget"):
            deadline = now + seconds_of(item.time_budget)
        if item.HasField("deadline"):
            wall_left = seconds_of(item.deadline) - time.time()
            deadline = min(deadline, now + wall_left)
        return deadline

    def _status(self, refusal: Refusal) -> status_pb2.Status:
        """The refusal as a status; those without per-request details share one prebuilt each."""
        if refusal.retry_after_s is None and refusal.expected_s is None and not refusal.violations:
            key = (refusal.code, refusal.message, refusal.reason.value)
            status = self._statuses.get(key)
            if status is None:
                status = self._statuses[key] = make_status(
                    refusal.code, refusal.message, reason=refusal.reason
                )
            return status
        return make_status(
            refusal.code,
            refusal.message,
            reason=refusal.reason,
            retry_after=None if refusal.retry_after_s is None else timedelta(seconds=refusal.retry_after_s),
            # The router sheds by this (router/shedding.py) until the wait has drained.
            metadata=None
            if refusal.expected_s is None
            else {EXPECTED_MS: f"{refusal.expected_s * 1000:.3f}"},
            violations=refusal.violations,
        )

    def _reclaim_idle(self, model: str, version: str) -> int:
        """Drop the version's idle queues (a parameter set nobody waits on); return how many
        remain. Without this, every distinct parameter set a caller ever sent would keep a
        queue and its scheduler task for good."""
        mine = [k for k in self.queues if k[0] == model and k[1] == version]
        for key in mine:
            if not self.queues[key].busy:
                del self.queues[key]
                self._queue_tasks.pop(key).cancel()
        return sum(1 for k in self.queues if k[0] == model and k[1] == version)

    def _queue(self, item: batcher_pb2.SubmitItem, config: VersionConfig) -> VersionQueue | None:
        """The item's queue, made on first use; None when the version has no room for
        another parameter set."""
        key: QueueKey = (item.model, item.version, tuple(sorted(item.parameters.items())))
        queue = self.queues.get(key)
        if queue is None:
            if self._reclaim_idle(item.model, item.version) >= self._settings.max_parameter_sets:
                return None
            scheduler = SchedulerConfig(
                max_batch_rows=config.max_batch_size,
                max_window_s=config.max_queue_delay_s,
                slack_margin_s=self._settings.slack_margin_s,
                aging_s=self._settings.aging_s,
                headroom=self._settings.headroom,
                fixed_window_s=self._settings.fixed_window_s,
            )
            queue = VersionQueue(
                key,
                scheduler,
                self._settings,
                self._directory,
                self.dispatcher,
                self._metrics,
                self.finish,
                self._wake,
                self._contenders,
                self.fair,
                self._clock,
            )
            self.queues[key] = queue
            self._queue_tasks[key] = asyncio.create_task(queue.run())
        return queue

    def _wake(self, deferred_only: bool) -> None:
        waiting = [q for q in self.queues.values() if q.entries and (q.deferred or not deferred_only)]
        # Woken queues run in the order they are poked, and the first takes the free slot:
        # the one whose oldest item waited longest goes first, or one tenant's versions on a
        # shared node would always be served in the order their queues were made.
        for queue in sorted(waiting, key=lambda q: q.entries[0].arrival):
            queue.poke()

    def _contenders(self, version_key: str) -> dict[str, float]:
        """Tenants with queued work in any queue whose version shares a replica with
        ``version_key`` (they compete for the same slots), each with the cheapest next
        batch it has waiting in those queues."""
        mine = {r.name for r in self._directory.ready(version_key)}
        costs: dict[str, float] = {}
        for queue in self.queues.values():
            if not queue.entries:
                continue
            if queue.version_key == version_key or mine & {
                r.name for r in self._directory.ready(queue.version_key)
            }:
                for tenant, cost in queue.next_batch_costs().items():
                    costs[tenant] = min(cost, costs.get(tenant, cost))
        return costs

    def finish(self, entry: Entry, result: batcher_pb2.ItemResult) -> None:
        """Fan an entry's result out to every caller still waiting for it."""
        now = self._clock()
        if self._inflight.get(entry.key) is entry:
            del self._inflight[entry.key]
        if result.status.code == DEADLINE_CODE and not is_background(entry.tenant):
            self.shed_at = now  # a tenant's item ran out of time: as much a refusal as one at the door
        config = self._directory.versions.get(f"{entry.queue[0]}:{entry.queue[1]}")
        if config is not None and config.cacheable and result.status.code == 0:
            self._cache.put(entry.key, result, now)
        for waiter in entry.waiters:
            self._streams.get(waiter.stream, {}).pop(waiter.request_id, None)
            if waiter.done:
                continue
            reply = batcher_pb2.ItemResult()
            reply.CopyFrom(result)
            reply.request_id, reply.coalesced = waiter.request_id, waiter.coalesced
            if result.status.code == 0:
                set_seconds(reply.timing.total, now - waiter.arrival)
                queued = max(0.0, now - waiter.arrival - seconds_of(result.timing.compute))
                set_seconds(reply.timing.queue, queued)
            waiter.deliver(reply)

    def cancel(self, stream: int, request_id: str) -> None:
        """The caller left: stop waiting; drop the work only if nobody else waits for it."""
        found = self._streams.get(stream, {}).pop(request_id, None)
        if found is None:
            return
        entry, waiter = found
        waiter.done = True
        if not entry.live_waiters() and not entry.dispatched:
            self.queues[entry.queue].remove(entry)
            if self._inflight.get(entry.key) is entry:
                del self._inflight[entry.key]
            self._metrics.shed.labels(model=entry.queue[0], version=entry.queue[1], reason="cancelled").inc()

    def stream_closed(self, stream: int) -> None:
        for request_id in list(self._streams.get(stream, {})):
            self.cancel(stream, request_id)
        self._streams.pop(stream, None)

    def queue_stats(self) -> batcher_pb2.QueueStatsResponse:
        now = self._clock()
        stats = []
        for queue in self.queues.values():
            entry = batcher_pb2.QueueStats(
                model=queue.model,
                version=queue.version,
                depth=queue.rows,
                capacity=self._settings.max_queue_rows,
                drain_rate=queue.drained.rate(now),
                target_batch_size=queue.last_target_rows,
            )
            set_seconds(entry.window, queue.last_decision_window)
            stats.append(entry)
        return batcher_pb2.QueueStatsResponse(queues=stats)

    async def drain(self) -> None:
        """Take no new items; dispatch what is queued (reason drain) and wait for it."""
        self.accepting = False
        for queue in self.queues.values():
            queue.draining = True
            queue.poke()
        await asyncio.gather(*(q.wait_idle() for q in self.queues.values()))

    async def close(self) -> None:
        for task in self._queue_tasks.values():
            task.cancel()
        await asyncio.gather(*self._queue_tasks.values(), return_exceptions=True)
