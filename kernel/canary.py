"""Canary analysis from the platform's own metrics: a canary version against its baseline over
the same window, as Kayenta judges canaries.

- Errors: the server's own faults (``ferryman.errors.SERVER_FAULTS``; never what the caller
  did) per request. The canary fails when its rate exceeds the baseline's by more than
  ``max_error_increase`` and a two-proportion z-test finds the difference significant.
- Latency: the Mann-Whitney U test over the router's service-time histograms (the bucket is
  the value, ties within a bucket): latency less the wait in the batcher's queue, because a
  canary with a small share of traffic waits longer for its batches to fill, which says
  nothing about the version (measured: an identical version at 10 % waited 11 ms in the
  queue against the baseline's 7 and was judged slower end to end). The canary fails when
  it is significantly slower *and* the effect is large: the probability that a canary
  request takes longer than a baseline one exceeds one half by more than
  ``latency_margin`` (a tiny but significant shift on many requests is no reason to roll
  back), and its mean service time (exact: the histograms' sums and counts) is at least
  ``min_latency_increase`` above the baseline's. The rank test alone reads the router's
  buckets, which stand ~2x apart: a version 10% slower whose requests cross one bucket
  boundary ranks slower on most of them (an identical version, loaded while the baseline
  was warm, was rolled back at P = 0.65, p = 1.6e-05); quantiles interpolated in those
  buckets overstate such a shift up to 5x, so the size is taken from the means.
- Warm-up: a step's window opens ``warmup_s`` after the step began (the controller), so a
  version's first requests (caches, allocators, thread pools still cold) are not judged.
- Shadowed outputs (``max_diff_rate``): the share of the candidate's shadow answers that
  differ from the live ones beyond the tolerance, against a threshold.
- A tenant's outcome metric (``feedback_metric``, from ``Feedback`` calls): a
  non-inferiority test on the difference of means; the canary passes when the lower end
  of its confidence interval lies above ``-feedback_margin`` and fails when the upper end
  lies below it.
- Too few samples: inconclusive (wait longer), never a pass.

Pure: the caller gives the two versions' counts and histograms.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from statistics import NormalDist
from typing import Any

from ferryman.errors import SERVER_FAULTS
from ferryman_server.kernel.scrape import LATENCY, SERVICE, Samples, latency_buckets, quantile

FAULT_NAMES = frozenset(code.name for code in SERVER_FAULTS)
SHADOW_COMPARED = "ferryman_shadow_compared_total"
"""Shadowed answers compared with the live ones, by model, version and result."""
SHADOW_SAME = "same"


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
    min_latency_increase: float = 0.2
    """And its mean service time must exceed the baseline's by this share (0.2: 20% slower)
    before slower counts: the effect's size, beside the test's significance."""
    warmup_s: float = 10.0
    """Seconds of a step not judged: its window opens this long after the step began."""
    max_diff_rate: float | None = None
    """Share of shadowed answers that may differ from the live ones (None: not checked)."""
    feedback_metric: str = ""
    """A tenant outcome metric the canary must not be worse on (empty: not checked)."""
    feedback_margin: float = 0.0
    """How much lower the canary's mean of ``feedback_metric`` may be."""


@dataclass(frozen=True)
class VersionWindow:
    """One version's requests in the window."""

    requests: float
    server_errors: float
    latency: Mapping[float, float]
    """Cumulative latency buckets, upper bound (seconds) -> count: what callers saw."""
    service: Mapping[float, float]
    """The same for answered requests less their queue wait: what the version costs."""
    service_seconds: float = 0.0
    """The service times' sum (the histogram's ``_sum``): with ``service_count``, the exact mean."""
    service_count: float = 0.0

    @property
    def mean_service_s(self) -> float:
        return self.service_seconds / self.service_count if self.service_count > 0 else math.nan


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    reasons: list[str]
    numbers: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """JSON-safe (no NaN: a figure without samples is null)."""
        numbers = {k: None if math.isnan(v) else v for k, v in self.numbers.items()}
        return {"outcome": self.outcome.value, "reasons": list(self.reasons), "numbers": numbers}


@dataclass(frozen=True)
class Moments:
    """One version's values of an outcome metric: count, mean and variance."""

    n: float
    mean: float
    variance: float

    def interval(self, alpha: float) -> tuple[float, float]:
        """Two-sided (1 - alpha) confidence interval of the mean (normal approximation)."""
        half = _z(alpha) * math.sqrt(self.variance / self.n) if self.n else math.inf
        return self.mean - half, self.mean + half


def _z(alpha: float) -> float:
    return NormalDist().inv_cdf(1 - alpha / 2)


def lift(base: Moments, canary: Moments, alpha: float) -> tuple[float, float, float]:
    """The canary's mean minus the baseline's with its two-sided (1 - alpha) interval."""
    diff = canary.mean - base.mean
    if not base.n or not canary.n:
        return diff, -math.inf, math.inf
    half = _z(alpha) * math.sqrt(base.variance / base.n + canary.variance / canary.n)
    return diff, diff - half, diff + half


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
        "baseline_service_p99_ms": quantile(dict(base.service), 0.99) * 1000,
        "canary_service_p99_ms": quantile(dict(canary.service), 0.99) * 1000,
    }
    if canary.requests < gates.min_requests or base.requests < gates.min_requests:
        seen = f"{canary.requests:g} canary, {base.requests:g} baseline"
        return Verdict(
            Outcome.INCONCLUSIVE, [f"too few requests ({seen}; {gates.min_requests} each)"], numbers
        )
    increase, error_p = error_test(base, canary)
    slower, latency_p = latency_test(base.service, canary.service)
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
    base_mean, canary_mean = base.mean_service_s, canary.mean_service_s
    # Without the sums (an older router) the size is unknown: the rank test decides alone.
    increase = canary_mean / base_mean - 1 if base_mean > 0 and canary_mean >= 0 else math.inf
    numbers.update(
        baseline_service_mean_ms=base_mean * 1000,
        canary_service_mean_ms=canary_mean * 1000,
        service_mean_increase=increase if math.isfinite(increase) else math.nan,
    )
    material = increase >= gates.min_latency_increase
    if slower > 0.5 + gates.latency_margin and latency_p < gates.alpha and material:
        size = f", mean service {increase:+.0%}" if math.isfinite(increase) else ""
        reasons.append(f"slower: P(canary > baseline) = {slower:.2f} (p={latency_p:.2g}){size}")
    if reasons:
        return Verdict(Outcome.FAIL, reasons, numbers)
    return Verdict(Outcome.PASS, ["no significant, material difference in errors or latency"], numbers)


def version_window(before: Samples, after: Samples, model: str, version: str) -> VersionWindow:
    """One version's requests, server errors and latency buckets between two scrapes."""

    def grew(key: tuple[str, tuple[tuple[str, str], ...]], value: float) -> float:
        return value - before.get(key, 0.0)

    requests = errors = 0.0
    for key, value in after.items():
        name, labels = key
        fields = dict(labels)
        if name != "ferryman_requests_total" or (fields.get("model"), fields.get("version")) != (
            model,
            version,
        ):
            continue
        requests += grew(key, value)
        errors += grew(key, value) if fields.get("code") in FAULT_NAMES else 0.0

    def histogram(metric: str) -> dict[float, float]:
        where = {"model": model}
        now = latency_buckets(after, by="version", where=where, metric=metric).get(version, {})
        then = latency_buckets(before, by="version", where=where, metric=metric).get(version, {})
        return {bound: count - then.get(bound, 0.0) for bound, count in now.items()}

    def total(name: str) -> float:
        return sum(
            grew(key, value)
            for key, value in after.items()
            if key[0] == name and (dict(key[1]).get("model"), dict(key[1]).get("version")) == (model, version)
        )

    return VersionWindow(
        requests,
        errors,
        latency=histogram(LATENCY),
        service=histogram(SERVICE),
        service_seconds=total(f"{SERVICE}_sum"),
        service_count=total(f"{SERVICE}_count"),
    )


def shadow_window(before: Samples, after: Samples, model: str, version: str) -> tuple[float, float]:
    """The version's shadowed answers compared between two scrapes, and how many differed
    (an error of the shadow counts as a difference)."""
    compared = differed = 0.0
    for key, value in after.items():
        name, labels = key
        fields = dict(labels)
        if name != SHADOW_COMPARED or (fields.get("model"), fields.get("version")) != (model, version):
            continue
        grew = value - before.get(key, 0.0)
        compared += grew
        differed += grew if fields.get("result") != SHADOW_SAME else 0.0
    return compared, differed


def judge_shadow(compared: float, differed: float, gates: Gates) -> Verdict:
    """The candidate's shadowed answers against the live ones."""
    if gates.max_diff_rate is None:
        return Verdict(Outcome.PASS, [])
    numbers = {"shadow_compared": compared, "shadow_diff_rate": differed / compared if compared else math.nan}
    if compared < gates.min_requests:
        return Verdict(Outcome.INCONCLUSIVE, [f"too few shadowed answers ({compared:g})"], numbers)
    rate = differed / compared
    if rate > gates.max_diff_rate:
        reason = f"shadowed answers differ {rate:.1%} of the time (at most {gates.max_diff_rate:.1%})"
        return Verdict(Outcome.FAIL, [reason], numbers)
    return Verdict(Outcome.PASS, [], numbers)


def judge_feedback(base: Moments, canary: Moments, gates: Gates) -> Verdict:
    """The canary's mean of the tenant's outcome metric against the baseline's."""
    if not gates.feedback_metric:
        return Verdict(Outcome.PASS, [])
    metric = gates.feedback_metric
    diff, low, high = lift(base, canary, gates.alpha)
    numbers = {
        f"baseline_{metric}_n": base.n,
        f"canary_{metric}_n": canary.n,
        f"baseline_{metric}_mean": base.mean,
        f"canary_{metric}_mean": canary.mean,
        f"{metric}_lift": diff,
        f"{metric}_lift_low": low,
        f"{metric}_lift_high": high,
    }
    if min(base.n, canary.n) < gates.min_requests:
        seen = f"{canary.n:g} canary, {base.n:g} baseline"
        return Verdict(Outcome.INCONCLUSIVE, [f"too few {metric} reports ({seen})"], numbers)
    interval = f"{diff:+.3g} [{low:+.3g}, {high:+.3g}]"
    if high < -gates.feedback_margin:
        return Verdict(Outcome.FAIL, [f"{metric} worse: {interval}"], numbers)
    if low > -gates.feedback_margin:
        return Verdict(Outcome.PASS, [f"{metric} not worse: {interval}"], numbers)
    return Verdict(Outcome.INCONCLUSIVE, [f"{metric} undecided: {interval}"], numbers)


def combine(verdicts: Sequence[Verdict]) -> Verdict:
    """One verdict from several gates: any failure fails, else any doubt waits."""
    numbers: dict[str, float] = {}
    for verdict in verdicts:
        numbers.update(verdict.numbers)
    for outcome in (Outcome.FAIL, Outcome.INCONCLUSIVE):
        reasons = [r for verdict in verdicts if verdict.outcome == outcome for r in verdict.reasons]
        if any(verdict.outcome == outcome for verdict in verdicts):
            return Verdict(outcome, reasons, numbers)
    return Verdict(Outcome.PASS, [r for verdict in verdicts for r in verdict.reasons], numbers)
