"""The batcher's behaviour behind its servicer: admit items, coalesce, queue, fan out."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import timedelta

import grpc
from google.rpc import status_pb2

from batcher.cache import TTLCache
from batcher.coalescer import coalescing_key, input_digest
from batcher.dispatcher import Dispatcher
from batcher.entries import Entry, Finisher, QueueKey, Sink, Waiter
from batcher.fairness import FairShare
from batcher.metrics import BatcherMetrics
from batcher.queue import VersionQueue
from batcher.replicas import ReplicaDirectory, VersionConfig
from batcher.scheduler import SchedulerConfig
from batcher.settings import BatcherSettings
from ferryman.errors import EXPECTED_MS, OVERLOADED, make_status
from ferryman.telemetry import parent_context, tracer
from ferryman.v1 import batcher_pb2, common_pb2

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
        self.accepting = True
        self._tracer = tracer("ferryman.batcher")

    def pending(self, stream: int) -> int:
        return len(self._streams.get(stream, {}))

    def submit(self, item: batcher_pb2.SubmitItem, sink: Sink, stream: int) -> None:
        """Admit one item; its result (or error) reaches ``sink`` exactly once."""
        now = self._clock()
        labels = {"model": item.model, "version": item.version}

        def refuse(code: grpc.StatusCode, message: str, reason: str, **extra: object) -> None:
            self._metrics.shed.labels(**labels, reason=reason.lower()).inc()
            if extra:
                status = make_status(code, message, reason=reason, **extra)  # type: ignore[arg-type]
            else:
                status = self._static_status(code, message, reason)
            sink(batcher_pb2.ItemResult(request_id=item.request_id, status=status))

        # Deadlines first: under overload most refusals are late items, and this check is cheap.
        deadline = self._deadline(item, now)
        if deadline <= now:
            return refuse(grpc.StatusCode.DEADLINE_EXCEEDED, "the deadline passed before arrival", "DEADLINE")
        if not self.accepting:
            return refuse(grpc.StatusCode.UNAVAILABLE, "batcher is draining", "DRAINING")
        version_key = f"{item.model}:{item.version}"
        config = self._directory.versions.get(version_key)
        if config is None:
            return refuse(grpc.StatusCode.NOT_FOUND, f"unknown version {version_key}", "UNKNOWN_VERSION")
        rows = item_rows(item)
        if rows < 1 or rows > config.max_batch_size:
            return refuse(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"an item needs 1..{config.max_batch_size} rows, got {rows}",
                "INVALID_INPUT",
                violations=[("inputs", f"rows must be 1..{config.max_batch_size}")],
            )
        if not self._directory.ready(version_key):
            return refuse(grpc.StatusCode.UNAVAILABLE, f"no ready replica serves {version_key}", "NO_REPLICA")
        input_hash = input_digest(item.inputs)
        key = coalescing_key(
            model=item.model,
            version=item.version,
            parameters=item.parameters,
            input_hash=input_hash,
            tenant=item.tenant,
            shareable=config.shareable,
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
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"{version_key} has {self._settings.max_parameter_sets} parameter sets in use",
                "TOO_MANY_PARAMETER_SETS",
                retry_after=timedelta(seconds=self._settings.retry_after_min_s),
            )
        # Admission by predicted wait: the batches already queued ahead of this item, the
        # current window, and its own batch. Refusing now is cheap and immediate; queueing
        # an item that cannot make its deadline only to expire it later is not.
        expected = queue.expected_latency(rows, self._directory.capacity(version_key).replicas, item.tenant)
        if expected > deadline - now:
            return refuse(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"{version_key} is overloaded: expected latency {expected * 1000:.0f} ms "
                f"exceeds this request's deadline",
                OVERLOADED,
                # The router sheds by this (router/shedding.py) until the wait has drained.
                metadata={EXPECTED_MS: f"{expected * 1000:.3f}"},
                retry_after=timedelta(seconds=max(self._settings.retry_after_min_s, expected)),
            )
        total = sum(q.rows for q in self.queues.values())
        if queue.rows + rows > self._settings.max_queue_rows or total + rows > self._settings.max_total_rows:
            return refuse(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"queue for {version_key} is full ({queue.rows} rows waiting)",
                "QUEUE_FULL",
                retry_after=self._retry_after(queue, now),
            )
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
        self.fair.seen(item.tenant, now)
        queue.add(entry)
        return None

    def _deadline(self, item: batcher_pb2.SubmitItem, now: float) -> float:
        """The item's deadline on our clock: the earlier of its time budget and wall deadline."""
        deadline = now + self._settings.default_timeout_s
        if item.HasField("time_budget"):
            deadline = now + item.time_budget.seconds + item.time_budget.nanos * 1e-9
        if item.HasField("deadline"):
            wall_left = item.deadline.seconds + item.deadline.nanos * 1e-9 - time.time()
            deadline = min(deadline, now + wall_left)
        return deadline

    def _static_status(self, code: grpc.StatusCode, message: str, reason: str) -> status_pb2.Status:
        """Refusals without per-request details share one prebuilt status each."""
        key = (code, message, reason)
        status = self._statuses.get(key)
        if status is None:
            status = self._statuses[key] = make_status(code, message, reason=reason)
        return status

    def _retry_after(self, queue: VersionQueue, now: float) -> timedelta:
        """How long the queue needs to drain at its measured rate."""
        rate = queue.drained.rate(now)
        seconds = queue.rows / rate if rate > 0 else self._settings.retry_after_max_s
        bounded = min(self._settings.retry_after_max_s, max(self._settings.retry_after_min_s, seconds))
        return timedelta(seconds=bounded)

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
                slack_margin_s=self._settings.slack_margin_ms / 1000,
                aging_s=self._settings.aging_ms / 1000,
                headroom=self._settings.headroom,
                fixed_window_s=(
                    None if self._settings.fixed_window_ms is None else self._settings.fixed_window_ms / 1000
                ),
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
        for queue in self.queues.values():
            if queue.entries and (queue.deferred or not deferred_only):
                queue.poke()

    def _contenders(self, version_key: str) -> set[str]:
        """Tenants with queued work in any queue whose version shares a replica with
        ``version_key`` (they compete for the same slots)."""
        mine = {r.name for r in self._directory.ready(version_key)}
        tenants: set[str] = set()
        for queue in self.queues.values():
            if not queue.entries:
                continue
            if queue.version_key == version_key or mine & {
                r.name for r in self._directory.ready(queue.version_key)
            }:
                tenants |= queue.waiting_tenants()
        return tenants

    def finish(self, entry: Entry, result: batcher_pb2.ItemResult) -> None:
        """Fan an entry's result out to every caller still waiting for it."""
        now = self._clock()
        if self._inflight.get(entry.key) is entry:
            del self._inflight[entry.key]
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
                reply.timing.total.FromTimedelta(timedelta(seconds=now - waiter.arrival))
                queued = max(0.0, now - waiter.arrival - result.timing.compute.ToTimedelta().total_seconds())
                reply.timing.queue.FromTimedelta(timedelta(seconds=queued))
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
            entry.window.FromTimedelta(timedelta(seconds=queue.last_decision_window))
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
