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

    def seed(self, profile: Mapping[int, float]) -> None:
        """Take a node's warm-up profile for sizes not yet measured live."""
        for size, seconds in profile.items():
            if size > 0 and seconds > 0:
                self.points.setdefault(size, seconds)

    def observe(self, rows: int, seconds: float) -> None:
        """Blend a measured batch (rows, wall seconds) into the nearest point."""
        if rows <= 0 or seconds <= 0:
            return
        old = self.points.get(rows)
        self.points[rows] = seconds if old is None else old + self.smoothing * (seconds - old)

    def predict(self, rows: int) -> float:
        """Expected seconds to run a batch of ``rows`` rows."""
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
