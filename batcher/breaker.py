"""A circuit breaker per node: an enum state machine driven by the caller's clock."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class BreakerState(StrEnum):
    CLOSED = "closed"  # calls flow
    OPEN = "open"  # calls refused until the cooldown passes
    HALF_OPEN = "half_open"  # one probe call decides


_TRANSITIONS: dict[BreakerState, frozenset[BreakerState]] = {
    BreakerState.CLOSED: frozenset({BreakerState.OPEN}),
    BreakerState.OPEN: frozenset({BreakerState.HALF_OPEN}),
    BreakerState.HALF_OPEN: frozenset({BreakerState.CLOSED, BreakerState.OPEN}),
}


@dataclass
class Breaker:
    """Opens after ``threshold`` consecutive failures; half-opens after ``cooldown_s``."""

    threshold: int
    cooldown_s: float
    state: BreakerState = BreakerState.CLOSED
    failures: int = 0
    opened_at: float = 0.0
    probing: bool = False

    def _move(self, target: BreakerState) -> None:
        if target not in _TRANSITIONS[self.state]:
            raise RuntimeError(f"breaker {self.state} cannot become {target}")
        self.state = target

    def allows(self, now: float) -> bool:
        """Whether a call may go to this node now (a half-open breaker lets one probe through)."""
        if self.state == BreakerState.OPEN and now - self.opened_at >= self.cooldown_s:
            self._move(BreakerState.HALF_OPEN)
            self.probing = False
        return self.state == BreakerState.CLOSED or (
            self.state == BreakerState.HALF_OPEN and not self.probing
        )

    def on_call(self) -> None:
        """A call is being sent (marks the half-open probe as taken)."""
        if self.state == BreakerState.HALF_OPEN:
            self.probing = True

    def on_success(self) -> None:
        self.failures = 0
        if self.state == BreakerState.HALF_OPEN:
            self._move(BreakerState.CLOSED)
            self.probing = False

    def trip(self, now: float) -> None:
        """Open at once, whatever the count: the node stopped answering (a batch outlived its
        timeout), which one failure already shows."""
        self.failures = max(self.failures + 1, self.threshold)
        if self.state != BreakerState.OPEN:
            self._move(BreakerState.OPEN)
        self.opened_at = now
        self.probing = False

    def on_failure(self, now: float) -> None:
        self.failures += 1
        if self.state == BreakerState.HALF_OPEN or (
            self.state == BreakerState.CLOSED and self.failures >= self.threshold
        ):
            self._move(BreakerState.OPEN)
            self.opened_at = now
            self.probing = False
