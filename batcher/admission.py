"""Whether the batcher takes an item: pure decisions over data and a clock.

Two checks, in the order the batcher needs their inputs: ``check_item`` before any
lookup (cheap, and under overload most refusals are late items), ``check_queue`` once
the item's queue is known (its predicted latency and fill). The service turns a
``Refusal`` into a gRPC status; nothing here touches a socket.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import grpc

from ferryman.errors import Reason


@dataclass(frozen=True)
class Refusal:
    code: grpc.StatusCode
    reason: Reason
    message: str
    retry_after_s: float | None = None
    expected_s: float | None = None
    """The predicted latency an OVERLOADED refusal announces (the router sheds by it)."""
    violations: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class QueueLimits:
    max_queue_rows: int
    max_total_rows: int
    retry_after_min_s: float
    retry_after_max_s: float


def check_item(
    now: float,
    deadline: float,
    accepting: bool,
    version_key: str,
    max_rows: int | None,
    rows: int,
    unserved: Callable[[], Refusal | None],
) -> Refusal | None:
    """Refuse what cannot be queued at all: late, draining, unknown version (``max_rows``
    None), rows outside 1..max batch size, nothing to serve it (``unserved``: why no
    replica can, None when one serves it or a load of it is under way). ``unserved`` is
    asked last, as it may start a load: an item refused for anything else never does."""
    if deadline <= now:
        return Refusal(
            grpc.StatusCode.DEADLINE_EXCEEDED, Reason.DEADLINE, "the deadline passed before arrival"
        )
    if not accepting:
        return Refusal(grpc.StatusCode.UNAVAILABLE, Reason.DRAINING, "batcher is draining")
    if max_rows is None:
        return Refusal(grpc.StatusCode.NOT_FOUND, Reason.UNKNOWN_VERSION, f"unknown version {version_key}")
    if rows < 1 or rows > max_rows:
        return Refusal(
            grpc.StatusCode.INVALID_ARGUMENT,
            Reason.INVALID_INPUT,
            f"an item needs 1..{max_rows} rows, got {rows}",
            violations=[("inputs", f"rows must be 1..{max_rows}")],
        )
    return unserved()


def check_queue(
    now: float,
    deadline: float,
    version_key: str,
    rows: int,
    expected_s: float,
    queue_rows: int,
    total_rows: int,
    drain_rate: float,
    limits: QueueLimits,
) -> Refusal | None:
    """Refuse an item its queue cannot answer in time (``expected_s``: its predicted
    latency there), or cannot hold (the queue's or the batcher's row limit)."""
    # Refusing now is cheap and immediate; queueing an item that cannot make its deadline
    # only to expire it later is not.
    if expected_s > deadline - now and queue_rows == 0 and total_rows == 0:
        # Nothing is queued at all: the item's own batch is what takes too long. No wait
        # helps, so this is its deadline's fault, not load (and no retry is suggested).
        return Refusal(
            grpc.StatusCode.DEADLINE_EXCEEDED,
            Reason.DEADLINE_TOO_SHORT,
            f"{version_key} needs {expected_s * 1000:.0f} ms when idle, more than this request's deadline",
        )
    if expected_s > deadline - now:
        return Refusal(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            Reason.OVERLOADED,
            f"{version_key} is overloaded: expected latency {expected_s * 1000:.0f} ms "
            f"exceeds this request's deadline",
            retry_after_s=max(limits.retry_after_min_s, expected_s),
            expected_s=expected_s,
        )
    if queue_rows + rows > limits.max_queue_rows or total_rows + rows > limits.max_total_rows:
        # Retry once the queue has drained at its measured rate.
        drain_s = queue_rows / drain_rate if drain_rate > 0 else limits.retry_after_max_s
        return Refusal(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            Reason.QUEUE_FULL,
            f"queue for {version_key} is full ({queue_rows} rows waiting)",
            retry_after_s=min(limits.retry_after_max_s, max(limits.retry_after_min_s, drain_s)),
        )
    return None
