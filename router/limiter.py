"""The router's adaptive concurrency limit: how many requests may be in flight at once,
learned from how many of them the platform had to refuse for load (additive increase,
multiplicative decrease, as TCP and Netflix's AIMD concurrency limit do).

A request past the limit is refused at the door, before routing, quota, the batcher, its
span or its log line: under overload refusing must cost next to nothing, or refusing alone
takes the cores serving needs. Per window of answered requests:

- when more than ``drop_ratio`` of them were refused further down for load (the router's
  shedder or the batcher: OVERLOADED, QUEUE_FULL), the limit drops to ``backoff`` x the
  most that were in flight: the queues below were holding more than they could serve in
  time, and fewer admitted requests each get answered in time instead of most being late;
- otherwise, while requests come close to the limit (at least half of it in flight), it
  grows by its square root; an idle router does not raise its limit forever.

Latency alone is not the signal: on a batching platform latency rises with concurrency
while throughput rises too, so a latency gradient would cap the batches it exists to fill.

The limit is shared fairly: past it, a tenant holding fewer than its share (the limit over
the tenants with requests in flight) is still admitted, so one tenant's flood fills the
limit for itself only. Pure: the caller passes the clock and each request's outcome.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class LimitConfig:
    initial: int
    """The limit before any window (also its ceiling)."""
    minimum: int
    backoff: float
    """The limit after a window with too many load refusals, times the peak in flight."""
    drop_ratio: float
    """Share of a window's requests refused for load above which the limit drops."""
    window_s: float
    """Shortest time the limit is recomputed over."""
    window_samples: int
    """Fewest ended requests a window needs before it counts."""


class AdaptiveLimit:
    """Admit requests up to a limit that load refusals adjust; see the module's docstring."""

    def __init__(self, config: LimitConfig) -> None:
        self._config = config
        self.limit = float(config.initial)
        self.inflight = 0
        self._by_tenant: dict[str, int] = {}
        self._ended = 0
        self._dropped = 0
        self._peak = 0
        self._window_start: float | None = None

    def try_acquire(self, tenant: str) -> bool:
        """Admit one request of ``tenant`` (True), or refuse it (False): nothing to undo."""
        held = self._by_tenant.get(tenant, 0)
        if self.inflight >= int(self.limit):
            share = self.limit / max(1, len(self._by_tenant) + (held == 0))
            if held >= share:
                return False
        self._by_tenant[tenant] = held + 1
        self.inflight += 1
        self._peak = max(self._peak, self.inflight)
        return True

    def release(self, tenant: str, dropped: bool, now: float) -> None:
        """An admitted request of ``tenant`` ended; ``dropped``: refused further down for load."""
        self.inflight -= 1
        held = self._by_tenant[tenant] - 1
        if held:
            self._by_tenant[tenant] = held
        else:
            del self._by_tenant[tenant]
        self._ended += 1
        self._dropped += dropped
        if self._window_start is None:
            self._window_start = now
        c = self._config
        if now - self._window_start >= c.window_s and self._ended >= c.window_samples:
            self._update()
            self._ended, self._dropped, self._peak, self._window_start = 0, 0, self.inflight, now

    def _update(self) -> None:
        c = self._config
        if self._dropped > c.drop_ratio * self._ended:
            limit = min(self.limit, float(self._peak)) * c.backoff
        elif self._peak >= self.limit / 2:
            limit = self.limit + math.sqrt(self.limit)
        else:
            return
        self.limit = max(float(c.minimum), min(float(c.initial), limit))
