"""Canary analysis over histograms (``ferryman_server.kernel.canary``): pure, with made-up windows."""

from __future__ import annotations

import math
import random

from ferryman_server.kernel.canary import Gates, Outcome, VersionWindow, judge, latency_test

BOUNDS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, math.inf)


def histogram(latencies: list[float]) -> dict[float, float]:
    """Cumulative buckets, as the router exports them."""
    return {b: float(sum(1 for x in latencies if x <= b)) for b in BOUNDS}


def window(latencies: list[float], errors: int = 0) -> VersionWindow:
    buckets = histogram(latencies)
    return VersionWindow(requests=len(latencies), server_errors=errors, latency=buckets, service=buckets)


def draws(seed: int, n: int, median_s: float) -> list[float]:
    rng = random.Random(seed)
    return [median_s * math.exp(rng.gauss(0, 0.3)) for _ in range(n)]


def test_the_same_distribution_passes() -> None:
    verdict = judge(window(draws(1, 500, 0.008)), window(draws(2, 500, 0.008)))
    assert verdict.outcome == Outcome.PASS, verdict.reasons
    assert 0.4 < verdict.numbers["p_canary_slower"] < 0.6


def test_a_canary_twice_as_slow_fails_on_latency_with_the_numbers() -> None:
    verdict = judge(window(draws(1, 300, 0.008)), window(draws(2, 300, 0.016)))
    assert verdict.outcome == Outcome.FAIL
    assert any("slower" in r for r in verdict.reasons)
    assert verdict.numbers["canary_p50_ms"] > 1.5 * verdict.numbers["baseline_p50_ms"]
    assert verdict.numbers["latency_p"] < 0.01


def test_a_faster_canary_never_fails_on_latency() -> None:
    assert judge(window(draws(1, 300, 0.016)), window(draws(2, 300, 0.008))).outcome == Outcome.PASS


def test_a_canary_failing_one_request_in_five_fails_on_errors() -> None:
    base, canary = draws(1, 400, 0.008), draws(2, 400, 0.008)
    verdict = judge(window(base, errors=2), window(canary, errors=80))
    assert verdict.outcome == Outcome.FAIL
    assert any("server errors" in r for r in verdict.reasons)
    assert math.isclose(verdict.numbers["canary_error_rate"], 0.2)


def test_a_tiny_but_significant_shift_is_not_material() -> None:
    # Every request one bucket up would be significant; half a bucket on a few is not material.
    base = [0.004] * 1000
    canary = [0.004] * 900 + [0.008] * 100
    slower, p = latency_test(histogram(base), histogram(canary))
    assert p < 0.01 and slower < 0.6
    assert judge(window(base), window(canary)).outcome == Outcome.PASS


def test_too_few_requests_is_inconclusive_never_a_pass() -> None:
    verdict = judge(window(draws(1, 500, 0.008)), window(draws(2, 20, 0.5)), Gates(min_requests=50))
    assert verdict.outcome == Outcome.INCONCLUSIVE
    assert "too few" in verdict.reasons[0]
