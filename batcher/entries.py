"""Queued work: an Entry is one execution, shared by one or more Waiters (callers)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from opentelemetry.trace import Span

from ferryman.v1 import batcher_pb2, common_pb2

QueueKey = tuple[str, str, tuple[tuple[str, str], ...]]
"""(model, version, sorted parameters): items batch together only within one key."""

Sink = Callable[[batcher_pb2.ItemResult], None]


@dataclass(eq=False)
class Waiter:
    """One caller of an entry."""

    request_id: str
    stream: int
    """The Submit stream it came on (cancellation is per stream)."""
    arrival: float
    deadline: float
    sink: Sink
    coalesced: bool = False
    done: bool = False
    span: Span | None = None
    """The item's queue-wait span, ended at dispatch (or at its answer, if never dispatched)."""

    def end_wait(self) -> None:
        if self.span is not None and self.span.is_recording():
            self.span.end()

    def deliver(self, result: batcher_pb2.ItemResult) -> None:
        self.end_wait()
        if not self.done:
            self.done = True
            self.sink(result)


@dataclass(eq=False)
class Entry:
    """One execution slot in a queue; identical requests join it as extra waiters."""

    key: str
    """Coalescing key."""
    queue: QueueKey
    tenant: str
    request_id: str
    priority: int
    arrival: float
    deadline: float
    rows: int
    inputs: Sequence[common_pb2.NamedTensor]
    input_hash: str
    traceparent: str = ""
    waiters: list[Waiter] = field(default_factory=list)
    dispatched: bool = False

    def join(self, waiter: Waiter, priority: int) -> None:
        """Another caller shares this execution: it runs as long and as urgently as any needs."""
        self.waiters.append(waiter)
        self.deadline = max(self.deadline, waiter.deadline)
        self.priority = max(self.priority, priority)

    def live_waiters(self) -> list[Waiter]:
        return [w for w in self.waiters if not w.done]


Finisher = Callable[[Entry, batcher_pb2.ItemResult], None]
"""Hands an entry its final result (fan-out to its waiters)."""
