"""Load shedding at the router: refuse at once what cannot make its deadline.

Two signals per version, both cheap to keep:

- Latency: a moving average of how long admitted requests took from this check to their
  answer. A request whose remaining budget is shorter would most likely be late; under
  overload the router's own queueing shows up here first, and refusing such requests at the
  door (before quota, stream messages and batcher work) is what keeps the rest on time.
  While refusing, one request per predicted latency still goes through as a probe, and the
  first answer after it replaces the average: the estimate cannot lock a version out.
- Pressure: when a batcher refuses an item as OVERLOADED it says how long the version's
  queue would make a new item wait. Until that wait has drained, requests with a shorter
  budget are refused here too; the first one after it asks the batcher again.

Pure: the caller passes the clock and the measurements.
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
    """Latency and overload refusals per ``model:version``, and the decision they imply."""

    def __init__(self, smoothing: float) -> None:
        self._smoothing = smoothing
        self._latency: dict[str, float] = {}
        self._pressure: dict[str, Pressure] = {}
        self._admitted_at: dict[str, float] = {}
        self._probing: set[str] = set()
        self._fastest: dict[str, float] = {}

    def observe(self, version_key: str, seconds: float) -> None:
        """An admitted request of ``version_key`` was answered ``seconds`` after its check."""
        self._fastest[version_key] = min(seconds, self._fastest.get(version_key, seconds))
        before = self._latency.get(version_key)
        if before is None or version_key in self._probing:
            self._probing.discard(version_key)
            self._latency[version_key] = seconds
        else:
            self._latency[version_key] = before + self._smoothing * (seconds - before)

    def record(self, version_key: str, expected_s: float, now: float) -> None:
        """The batcher refused an item of ``version_key``: a new one would wait ``expected_s``."""
        self._pressure[version_key] = Pressure(expected_s=expected_s, at=now)

    def wait(self, version_key: str, budget_s: float, now: float) -> float | None:
        """The predicted latency if a request with ``budget_s`` left must be refused now, else None."""
        latency = self._latency.get(version_key, 0.0)
        pressure = self._pressure.get(version_key)
        if pressure is not None:
            left = pressure.expected_s - (now - pressure.at)
            if left <= 0:
                del self._pressure[version_key]  # drained: the batcher decides again
            elif left > budget_s:
                return left
        if latency > budget_s and now - self._admitted_at.get(version_key, -latency) < latency:
            return latency
        if latency > budget_s:
            self._probing.add(version_key)  # its answer tells how fast the version is now
        self._admitted_at[version_key] = now
        return None

    def unmeetable(self, version_key: str, budget_s: float) -> bool:
        """Whether ``budget_s`` is shorter than any answer the version ever gave: no wait
        would help (DEADLINE_EXCEEDED), unlike a refusal for load (RESOURCE_EXHAUSTED)."""
        fastest = self._fastest.get(version_key)
        return fastest is not None and budget_s < fastest
