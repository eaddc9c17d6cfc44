"""Canary analysis over histograms (``ferryman_server.kernel.canary``): pure, with made-up windows."""

from __future__ import annotations

import math
import random

from ferryman_server.kernel.canary import Gates, Outcome, VersionWindow, judge, latency_test, version_window

BOUNDS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, math.inf)


def histogram(latencies: list[float]) -> dict[float, float]:
    """Cumulative buckets, as the router exports them."""
    return {b: float(sum(1 for x in latencies if x <= b)) for b in BOUNDS}


def window(latencies: list[float], errors: int = 0) -> VersionWindow:
    buckets = histogram(latencies)
    return VersionWindow(requests=len(latencies), server_errors=errors, latency=buckets, service=buckets)


def draws(seed: int, n: int, median_s: float, spread: float = 0.3) -> list[float]:
    rng = random.Random(seed)
    return [median_s * math.exp(rng.gauss(0, spread)) for _ in range(n)]


def measured(latencies: list[float]) -> VersionWindow:
    """A window with the histogram's sum and count, as the router exports them."""
    buckets = histogram(latencies)
    return VersionWindow(
        requests=len(latencies),
        server_errors=0,
        latency=buckets,
        service=buckets,
        service_seconds=sum(latencies),
        service_count=len(latencies),
    )


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


def test_a_version_ten_percent_slower_across_a_bucket_boundary_is_not_material() -> None:
    """The router's buckets stand ~2x apart: a 10% slower version whose requests cross the
    10 ms boundary ranks slower on most of them, significantly, and its bucket-interpolated
    median looks 20% slower. Its exact mean (the histogram's sum) says 10%: it passes; twice
    as slow fails, with the size in its reason."""
    base = draws(1, 2000, 0.009, spread=0.1)
    slightly = [x * 1.1 for x in draws(2, 2000, 0.009, spread=0.1)]
    slower, p = latency_test(histogram(base), histogram(slightly))
    assert p < 0.01 and slower > 0.6, (slower, p)  # what the rank test alone would fail
    assert judge(window(base), window(slightly)).outcome == Outcome.FAIL  # without the sums
    verdict = judge(measured(base), measured(slightly))
    assert verdict.outcome == Outcome.PASS, verdict.reasons
    assert 0.05 < verdict.numbers["service_mean_increase"] < 0.15
    doubled = judge(measured(base), measured([x * 2 for x in draws(2, 2000, 0.009, spread=0.1)]))
    assert doubled.outcome == Outcome.FAIL and "mean service +" in doubled.reasons[0]


def test_too_few_requests_is_inconclusive_never_a_pass() -> None:
    verdict = judge(window(draws(1, 500, 0.008)), window(draws(2, 20, 0.5)), Gates(min_requests=50))
    assert verdict.outcome == Outcome.INCONCLUSIVE
    assert "too few" in verdict.reasons[0]


def test_a_window_reads_the_service_times_sum_and_count_between_two_scrapes() -> None:
    def scraped(total_s: float, count: float) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        labels = (("model", "m"), ("tenant", "t"), ("version", "2"))
        other = (("model", "m"), ("tenant", "t"), ("version", "1"))
        return {
            ("ferryman_request_service_seconds_sum", labels): total_s,
            ("ferryman_request_service_seconds_count", labels): count,
            ("ferryman_request_service_seconds_sum", other): 99.0,
        }

    window = version_window(scraped(1.0, 100), scraped(3.0, 300), "m", "2")
    assert window.service_seconds == 2.0 and window.service_count == 200
    assert math.isclose(window.mean_service_s, 0.01)
