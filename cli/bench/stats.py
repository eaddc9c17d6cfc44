"""Measurement windows and their summary: pure functions, no I/O."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

STABLE_WINDOWS = 3
STABLE_TOLERANCE = 0.10


@dataclass
class Window:
    """One measurement window: latencies of OK answers, errors by code."""

    seconds: float
    latencies: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    error_latencies: dict[str, list[float]] = field(default_factory=dict)
    """Seconds to each error answer by code (how fast refusals come back)."""
    within_deadline: int = 0

    @property
    def throughput(self) -> float:
        return len(self.latencies) / self.seconds if self.seconds > 0 else 0.0

    @property
    def goodput(self) -> float:
        return self.within_deadline / self.seconds if self.seconds > 0 else 0.0


def stable(
    windows: Sequence[Window], count: int = STABLE_WINDOWS, tolerance: float = STABLE_TOLERANCE
) -> bool:
    """The perf_analyzer rule: the last ``count`` windows' throughputs agree within ``tolerance``."""
    if len(windows) < count:
        return False
    rates = [w.throughput for w in windows[-count:]]
    mean = statistics.fmean(rates)
    return mean > 0 and all(abs(r - mean) <= tolerance * mean for r in rates)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear between closest ranks; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summarize(windows: Sequence[Window]) -> dict[str, object]:
    """Throughput, goodput, latency percentiles (ms) and errors over the given windows."""
    seconds = sum(w.seconds for w in windows)
    latencies = [t for w in windows for t in w.latencies]
    error_latencies: dict[str, list[float]] = {}
    for w in windows:
        for code, times in w.error_latencies.items():
            error_latencies.setdefault(code, []).extend(times)
    errors: dict[str, int] = {}
    for w in windows:
        for code, n in w.errors.items():
            errors[code] = errors.get(code, 0) + n
    return {
        "seconds": round(seconds, 3),
        "answered": len(latencies),
        "throughput_rps": len(latencies) / seconds if seconds else 0.0,
        "goodput_rps": sum(w.within_deadline for w in windows) / seconds if seconds else 0.0,
        "p50_ms": percentile(latencies, 50) * 1000,
        "p90_ms": percentile(latencies, 90) * 1000,
        "p99_ms": percentile(latencies, 99) * 1000,
        "errors": errors,
        "error_latency_ms": {
            code: {"p50": percentile(ts, 50) * 1000, "p99": percentile(ts, 99) * 1000}
            for code, ts in sorted(error_latencies.items())
        },
    }
