"""Canary analysis from the platform's own metrics: a canary version against its baseline over
the same window, as Kayenta judges canaries.

- Errors: the server's own faults (``ferryman.errors.SERVER_FAULTS``; never what the caller
  did) per request. The canary fails when its rate exceeds the baseline's by more than
  ``max_error_increase`` and a two-proportion z-test finds the difference significant.
- Latency: the Mann-Whitney U test over the router's latency histograms (the bucket is the
  value, ties within a bucket). The canary fails when it is significantly slower *and* the
  effect is large: the probability that a canary request takes longer than a baseline one
  exceeds one half by more than ``latency_margin`` (a tiny but significant shift on many
  requests is no reason to roll back).
- Too few canary requests: inconclusive (wait longer), never a pass.

Pure: the caller gives the two versions' counts and histograms.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from ferryman.top import quantile


class Outcome(StrEnum):
    PASS = "pass"
    INCONCLUSIVE = "inconclusive"
    FAIL = "fail"


@dataclass(frozen=True)
class Gates:
    min_requests: int = 50
    """Canary requests in the window below which nothing is concluded."""
    alpha: float = 0.01
    """Significance level of both tests (one-sided: only worse fails)."""
    max_error_increase: float = 0.01
    """Server-error rate the canary may add to the baseline's (absolute)."""
    latency_margin: float = 0.1
    """P(canary slower than baseline) may exceed 0.5 by this much before it counts."""


@dataclass(frozen=True)
class VersionWindow:
    """One version's requests in the window."""

    requests: float
    server_errors: float
    latency: Mapping[float, float]
    """Cumulative latency buckets, upper bound (seconds) -> count."""


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    reasons: list[str]
    numbers: dict[str, float] = field(default_factory=dict)


def _upper_tail(z: float) -> float:
    """P(Z > z) for a standard normal Z."""
    return 0.5 * math.erfc(z / math.sqrt(2))


def error_test(base: VersionWindow, canary: VersionWindow) -> tuple[float, float]:
    """The canary's server-error rate minus the baseline's, and the one-sided p-value that
    the canary's rate is no higher (two-proportion z-test, pooled)."""
    n1, n2 = base.requests, canary.requests
    p1, p2 = base.server_errors / n1, canary.server_errors / n2
    pooled = (base.server_errors + canary.server_errors) / (n1 + n2)
    spread = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    if spread == 0:
        return p2 - p1, 1.0 if p2 <= p1 else 0.0
    return p2 - p1, _upper_tail((p2 - p1) / spread)


def counts(cumulative: Mapping[float, float]) -> list[tuple[float, float]]:
    """Per-bucket counts (upper bound, count) from cumulative ones."""
    out: list[tuple[float, float]] = []
    below = 0.0
    for bound in sorted(cumulative):
        out.append((bound, max(0.0, cumulative[bound] - below)))
        below = max(below, cumulative[bound])
    return out


def latency_test(base: Mapping[float, float], canary: Mapping[float, float]) -> tuple[float, float]:
    """P(a canary request is slower than a baseline one) from the histograms (ties count
    half), and the one-sided Mann-Whitney p-value that the canary is not slower (normal
    approximation with the tie correction)."""
    bounds = sorted(set(base) | set(canary))
    b = dict(counts({k: base.get(k, _fill(base, k)) for k in bounds}))
    c = dict(counts({k: canary.get(k, _fill(canary, k)) for k in bounds}))
    n1, n2 = sum(b.values()), sum(c.values())
    if n1 == 0 or n2 == 0:
        return 0.5, 1.0
    u, below = 0.0, 0.0
    ties = 0.0
    for bound in bounds:
        u += c[bound] * (below + 0.5 * b[bound])
        below += b[bound]
        t = b[bound] + c[bound]
        ties += t**3 - t
    n = n1 + n2
    mean = n1 * n2 / 2
    variance = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1)))
    effect = u / (n1 * n2)
    if variance <= 0:
        return effect, 1.0 if effect <= 0.5 else 0.0
    return effect, _upper_tail((u - mean) / math.sqrt(variance))


def _fill(cumulative: Mapping[float, float], bound: float) -> float:
    """A cumulative count at a bound the histogram lacks: that of the largest bound below."""
    below = [k for k in cumulative if k <= bound]
    return cumulative[max(below)] if below else 0.0


def judge(base: VersionWindow, canary: VersionWindow, gates: Gates = Gates()) -> Verdict:
    """The canary's verdict against the baseline over one window, with the numbers."""
    numbers = {
        "baseline_requests": base.requests,
        "canary_requests": canary.requests,
        "baseline_p50_ms": quantile(dict(base.latency), 0.5) * 1000,
        "canary_p50_ms": quantile(dict(canary.latency), 0.5) * 1000,
        "baseline_p99_ms": quantile(dict(base.latency), 0.99) * 1000,
        "canary_p99_ms": quantile(dict(canary.latency), 0.99) * 1000,
    }
    if canary.requests < gates.min_requests or base.requests < gates.min_requests:
        seen = f"{canary.requests:g} canary, {base.requests:g} baseline"
        return Verdict(
            Outcome.INCONCLUSIVE, [f"too few requests ({seen}; {gates.min_requests} each)"], numbers
        )
    increase, error_p = error_test(base, canary)
    slower, latency_p = latency_test(base.latency, canary.latency)
    numbers.update(
        baseline_error_rate=base.server_errors / base.requests,
        canary_error_rate=canary.server_errors / canary.requests,
        error_p=error_p,
        p_canary_slower=slower,
        latency_p=latency_p,
    )
    reasons: list[str] = []
    if increase > gates.max_error_increase and error_p < gates.alpha:
        reasons.append(f"server errors {increase:+.2%} over the baseline's (p={error_p:.2g})")
    if slower > 0.5 + gates.latency_margin and latency_p < gates.alpha:
        reasons.append(f"slower: P(canary > baseline) = {slower:.2f} (p={latency_p:.2g})")
    if reasons:
        return Verdict(Outcome.FAIL, reasons, numbers)
    return Verdict(Outcome.PASS, ["no significant, material difference in errors or latency"], numbers)
