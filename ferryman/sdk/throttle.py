"""Client-side adaptive throttling (Google SRE, "Handling Overload"): a client that the
platform keeps refusing stops sending most of its requests, so refusals stop costing the
router anything.

Over a sliding window the client counts the requests it sent and those the server accepted:
any answer but what an overloaded platform answers (``OVERLOAD_CODES``: refused, or too
late), or a refusal that says nothing of the platform's load (``NOT_OVERLOAD``: a refusal
that spilled into a job, the tenant's own quota). While accepts
keep up, nothing changes; once requests exceed ``k`` times the accepts, each new request is
refused locally with probability ``(requests - k * accepts) / (requests + 1)``. Refused
locally, a request is retried with backoff like one the server refused, and still counts
as sent: the probability falls as soon as the server accepts again. A sent request counts once answered,
not while in flight: a fresh client's burst of concurrent requests is no sign of refusals.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc

from ferryman.errors import Reason
from ferryman.sdk.errors import Overloaded

K = 2.0
"""Requests allowed per accept before the client refuses locally (SRE's usual value)."""
WINDOW_S = 30.0
"""How far back requests and accepts count."""
BUCKETS = 30
"""The window is kept as this many counters (O(1) memory and time per request)."""
THROTTLED = "CLIENT_THROTTLED"
OVERLOAD_CODES = frozenset({grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.DEADLINE_EXCEEDED})
"""Answers that are not accepts: a refusal, and an answer too late for its deadline (the
router's DEADLINE_UNMEETABLE, or none in time), which is how an overloaded platform answers
most requests past its capacity. UNAVAILABLE is not one: a router that is down is retried
and reported as down, not hidden behind local refusals."""


NOT_OVERLOAD = frozenset({Reason.ACCEPTED_AS_JOB, Reason.QUOTA_EXCEEDED, Reason.DEADLINE_TOO_SHORT})
"""Refusals that are no sign of an overloaded platform: one accepted as a job (refusing it
locally would lose it), the tenant's own quota (answered with when to retry; counting
it would throttle a tenant at its limit as if the platform were failing), and a deadline
shorter than the version needs even when idle (the caller's, which no load changes)."""


def throttled() -> Overloaded:
    """The error a locally refused request raises (retried like a server's refusal)."""
    return Overloaded(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "refused by the client: the platform has been refusing or timing out most requests; retry later",
        THROTTLED,
    )


@dataclass
class AdaptiveThrottle:
    """Requests and accepts in a sliding window, and the local refusal they imply."""

    enabled: bool = True
    """Off: count nothing and refuse nothing."""
    k: float = K
    window_s: float = WINDOW_S
    clock: Callable[[], float] = time.monotonic
    rng: random.Random = field(default_factory=random.Random)
    _requests: list[int] = field(default_factory=lambda: [0] * BUCKETS)
    _accepts: list[int] = field(default_factory=lambda: [0] * BUCKETS)
    _slots: list[int] = field(default_factory=lambda: [-1] * BUCKETS)

    def _bucket(self) -> int:
        """The current bucket, emptied when it last held an older slot of time."""
        slot = int(self.clock() // (self.window_s / BUCKETS))
        i = slot % BUCKETS
        if self._slots[i] != slot:
            self._slots[i], self._requests[i], self._accepts[i] = slot, 0, 0
        return i

    def _totals(self) -> tuple[int, int]:
        newest = int(self.clock() // (self.window_s / BUCKETS))
        live = [i for i in range(BUCKETS) if newest - self._slots[i] < BUCKETS]
        return sum(self._requests[i] for i in live), sum(self._accepts[i] for i in live)

    def rejection_probability(self) -> float:
        requests, accepts = self._totals()
        return max(0.0, (requests - self.k * accepts) / (requests + 1))

    def admit(self) -> bool:
        """Count a request about to be sent; False: refuse it locally instead."""
        if not self.enabled:
            return True
        if self.rng.random() >= self.rejection_probability():
            return True  # counted when answered: requests still in flight are not refusals
        self._requests[self._bucket()] += 1
        return False

    def answered(self, code: grpc.StatusCode, reason: str = "") -> None:
        """The server answered a sent request with ``code`` (OK or an error) and ``reason``.
        A request refused but accepted as a job (spilled) was accepted: throttling it
        locally would lose it instead."""
        if not self.enabled:
            return
        bucket = self._bucket()
        self._requests[bucket] += 1
        if code not in OVERLOAD_CODES or reason in NOT_OVERLOAD:
            self._accepts[bucket] += 1
