"""When to dispatch a batch and what goes in it: pure decisions over data and a clock.

A queue holds items of one (version, parameters). Each call to ``decide`` looks at
the items, the predicted batch latency and the load, and answers: which items can no
longer meet their deadline (fail them now, never run them), whether to dispatch now
and which items in which order, and otherwise when to look again.

- Order: fair between tenants (virtual time over estimated compute, see
  ``ferryman_server.batcher.fairness``); a tenant's own items by priority class plus one class per
  ``aging_s`` waited (nothing starves), then earliest deadline, then arrival. Items of
  a tenant that holds its share of node slots wait for one of its own.
- A batch only takes an item if the batch, with it, is predicted to finish before the
  deadline of every item in it: work that cannot be on time is never sent.
- Dispatch when the batch is full (max batch size), when the most urgent item's slack
  (deadline - now - predicted batch latency) drops to the margin, when the adaptive
  window closes, or when draining.
- The adaptive window: the smallest batch size whose throughput over the free
  parallel slots keeps up with the measured arrival rate (with headroom) is the
  target; the window is the time the arrival rate needs to fill the queue up to it,
  capped by the version's max delay. Light traffic gets a zero window (waiting buys
  nothing), heavy traffic waits just long enough for batches that keep up, and an
  idle device never waits (work-conserving: a batch in flight is what makes waiting
  free).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from ferryman_server.batcher.fairness import FairView, Work, fair_order
from ferryman_server.batcher.predictor import LatencyPredictor


class DispatchReason(StrEnum):
    FULL = "full"
    SLACK = "slack"
    WINDOW = "window"
    DRAIN = "drain"


@dataclass(frozen=True)
class SchedulerConfig:
    max_batch_rows: int
    max_window_s: float
    """Longest the window may grow (the version's max queue delay)."""
    slack_margin_s: float
    """Dispatch when the most urgent item has no more slack than this."""
    aging_s: float
    """Waiting this long raises an item by one priority class."""
    headroom: float
    """Target capacity as a multiple of the arrival rate (> 1 keeps queues short)."""
    fixed_window_s: float | None = None
    """A fixed window instead of the adaptive one (for comparison benchmarks)."""


@dataclass(frozen=True)
class Capacity:
    """What the version's usable replicas can take."""

    free_slots: int
    """Batches that could be sent right now."""
    total_slots: int
    """Batches that may be in flight at once across all ready replicas."""
    replicas: int = 1
    """Devices computing in parallel. A replica's extra in-flight slots only pipeline
    (the next batch waits at the node), so they add no throughput."""
    idle_replicas: int = 0
    """Replicas with no batch in flight."""


@dataclass(frozen=True)
class Load(Capacity):
    """Capacity, and how fast rows arrive."""

    arrival_rate: float = 0.0
    """Rows per second arriving at this queue."""


@dataclass(frozen=True)
class SchedulerOutput:
    """What one scheduling step decided for a queue: what to fail, what to dispatch, when
    to look again."""

    expired: list[int] = field(default_factory=list)
    """Indices of items that can no longer meet their deadline."""
    batch: list[int] = field(default_factory=list)
    """Indices to dispatch now, in dispatch order (empty: do not dispatch)."""
    reason: DispatchReason | None = None
    wake_at: float | None = None
    """When to decide again if nothing else happens (None: on the next event)."""
    target_rows: int = 1
    window_s: float = 0.0


def row_cost(predictor: LatencyPredictor, max_batch_rows: int) -> float:
    """Predicted compute seconds per row at full batches: the fair-share cost unit (what a
    row will cost the node, batched as it will be)."""
    return predictor.predict(max_batch_rows) / max_batch_rows


def target_batch_rows(
    predictor: LatencyPredictor, arrival_rate: float, replicas: int, max_rows: int, headroom: float
) -> int:
    """The smallest batch whose throughput over ``replicas`` keeps up with the arrivals."""
    if arrival_rate <= 0:
        return 1
    need = arrival_rate * headroom
    for rows in range(1, max_rows + 1):
        if max(1, replicas) * rows / predictor.predict(rows) >= need:
            return rows
    return max_rows


def adaptive_window(queued_rows: int, target_rows: int, arrival_rate: float, max_window_s: float) -> float:
    """How long to wait for the queue to reach the target batch size."""
    if queued_rows >= target_rows or arrival_rate <= 0:
        return 0.0
    return min(max_window_s, (target_rows - queued_rows) / arrival_rate)


def decide(
    now: float,
    items: Sequence[Work],
    config: SchedulerConfig,
    predictor: LatencyPredictor,
    load: Load,
    draining: bool = False,
    fair: FairView | None = None,
) -> SchedulerOutput:
    """The scheduler's decision for one queue at time ``now``."""
    expired = [i for i, item in enumerate(items) if item.deadline - now < predictor.predict(item.rows)]
    gone = set(expired)
    live = [i for i in range(len(items)) if i not in gone]
    if not live:
        return SchedulerOutput(expired=expired)
    # The next moment an item would become unmeetable: wake then to fail it early.
    expire_at = min(items[i].deadline - predictor.predict(items[i].rows) for i in live)

    view = fair or FairView()
    ordered = fair_order(items, live, now, config.aging_s, row_cost(predictor, config.max_batch_rows), view)
    batch: list[int] = []
    rows = 0
    earliest = float("inf")
    for i in ordered:
        item = items[i]
        if item.tenant in view.blocked or rows + item.rows > config.max_batch_rows:
            continue  # first fit: a smaller item further down may still fill the gap
        due = min(earliest, item.deadline)
        if batch and due - now < predictor.predict(rows + item.rows):
            continue  # with it the batch would finish too late for someone in it
        batch.append(i)
        rows += item.rows
        earliest = due
    queued_rows = sum(items[i].rows for i in live)
    if config.fixed_window_s is not None:
        target, window = config.max_batch_rows, config.fixed_window_s
    else:
        target = target_batch_rows(
            predictor, load.arrival_rate, load.replicas, config.max_batch_rows, config.headroom
        )
        # Waiting is free only while the device is busy with another batch; an idle
        # device is never kept waiting for a fuller batch.
        idle = load.idle_replicas > 0
        window = 0.0 if idle else adaptive_window(queued_rows, target, load.arrival_rate, config.max_window_s)
    if load.free_slots <= 0 or not batch:
        return SchedulerOutput(expired=expired, wake_at=expire_at, target_rows=target, window_s=window)

    predicted = predictor.predict(rows)
    slack = min(items[i].deadline for i in batch) - now - predicted
    oldest = min(items[i].arrival for i in live)
    reason: DispatchReason | None = None
    if draining:
        reason = DispatchReason.DRAIN
    elif rows >= config.max_batch_rows:
        reason = DispatchReason.FULL
    elif slack <= config.slack_margin_s:
        reason = DispatchReason.SLACK
    elif now - oldest >= window:
        reason = DispatchReason.WINDOW
    if reason is not None:
        return SchedulerOutput(
            expired=expired, batch=batch, reason=reason, target_rows=target, window_s=window
        )
    wake_at = min(oldest + window, now + slack - config.slack_margin_s, expire_at)
    return SchedulerOutput(expired=expired, wake_at=wake_at, target_rows=target, window_s=window)
