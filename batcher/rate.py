"""Arrival rate with exponential decay: a pure meter driven by the caller's clock."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class RateMeter:
    """Items per second over roughly the last ``tau_s`` seconds."""

    tau_s: float
    _rate: float = 0.0
    _last: float | None = None

    def _decay(self, now: float) -> None:
        if self._last is not None and now > self._last:
            self._rate *= math.exp(-(now - self._last) / self.tau_s)
        self._last = now if self._last is None else max(self._last, now)

    def add(self, count: float, now: float) -> None:
        self._decay(now)
        self._rate += count / self.tau_s

    def rate(self, now: float) -> float:
        self._decay(now)
        return self._rate
