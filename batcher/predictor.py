"""Predicted batch latency by batch size: the node's warm-up profile, refined online."""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass
class LatencyPredictor:
    """Piecewise-linear latency over measured batch sizes, each point an EWMA.

    Before anything is known it predicts ``default_s`` for every size; sizes beyond
    the largest measured one are extrapolated with the last segment's slope.
    """

    default_s: float
    smoothing: float
    points: dict[int, float] = field(default_factory=dict)
    """Model compute seconds by batch size."""
    overhead_s: float = 0.0
    """Moving average of the rest of a batch's round trip (transport, (de)serialization)."""
    _known: dict[int, float] = field(default_factory=dict, repr=False)
    """Compute predictions by rows since the points last changed: the scheduler asks for
    the same few sizes for every queued item on every decision."""

    def seed(self, profile: Mapping[int, float]) -> None:
        """Take a node's warm-up profile for sizes not yet measured live."""
        for size, seconds in profile.items():
            if size > 0 and seconds > 0:
                self.points.setdefault(size, seconds)
        self._known.clear()

    def observe(self, rows: int, compute_s: float, overhead_s: float = 0.0) -> None:
        """Blend a measured batch (rows, compute seconds, round-trip overhead) into the estimates.

        Compute and overhead are kept apart: the node's compute time is what batch size
        changes, while overhead is per batch and, under load, swollen by queueing that
        should not be mistaken for the model getting slower.
        """
        if rows <= 0 or compute_s <= 0:
            return
        old = self.points.get(rows)
        self.points[rows] = compute_s if old is None else old + self.smoothing * (compute_s - old)
        self._known.clear()
        self.overhead_s += self.smoothing * (max(0.0, overhead_s) - self.overhead_s)

    def predict(self, rows: int) -> float:
        """Expected seconds from dispatch to answer for a batch of ``rows`` rows."""
        known = self._known.get(rows)
        if known is None:
            known = self._known[rows] = self._compute(rows)
        return known + self.overhead_s

    def _compute(self, rows: int) -> float:
        if not self.points:
            return self.default_s
        sizes = sorted(self.points)
        if rows <= sizes[0]:
            return self.points[sizes[0]]
        if rows >= sizes[-1]:
            if len(sizes) == 1:
                return self.points[sizes[0]] * rows / sizes[0]
            a, b = sizes[-2], sizes[-1]
            slope = max(0.0, (self.points[b] - self.points[a]) / (b - a))
            return self.points[b] + slope * (rows - b)
        i = bisect.bisect_left(sizes, rows)
        a, b = sizes[i - 1], sizes[i]
        if b == rows:
            return self.points[b]
        t = (rows - a) / (b - a)
        return self.points[a] + t * (self.points[b] - self.points[a])
