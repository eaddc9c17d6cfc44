"""Load shedding at the router: refuse what the batcher would refuse, without asking it.

When a batcher refuses an item as OVERLOADED it says how long the version's queue would make
that item wait. Until that wait has drained, a request whose remaining budget is shorter
cannot be admitted either, so the router answers it at once: no quota reservation, no stream
message, no batcher work. Requests with a longer budget still go through, and the first
one after the wait has drained asks the batcher again. Pure: the caller passes the clock.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Pressure:
    """The batcher's last overload refusal for one version."""

    expected_s: float
    """Predicted latency for a new item at the time of the refusal."""
    at: float


class Shedder:
    """Overload refusals per ``model:version``, and the decision they imply for a new request."""

    def __init__(self) -> None:
        self._pressure: dict[str, Pressure] = {}

    def record(self, version_key: str, expected_s: float, now: float) -> None:
        """The batcher refused an item of ``version_key``: a new one would wait ``expected_s``."""
        self._pressure[version_key] = Pressure(expected_s=expected_s, at=now)

    def wait(self, version_key: str, budget_s: float, now: float) -> float | None:
        """The predicted wait if a request with ``budget_s`` left must be refused now, else None."""
        pressure = self._pressure.get(version_key)
        if pressure is None:
            return None
        left = pressure.expected_s - (now - pressure.at)
        if left <= 0:
            del self._pressure[version_key]  # drained: the batcher decides again
            return None
        return left if left > budget_s else None
