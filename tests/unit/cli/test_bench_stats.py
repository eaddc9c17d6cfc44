"""The load generator's window arithmetic."""

from __future__ import annotations

import math

import pytest

from ferryman_server.cli.bench.stats import Window, percentile, stable, summarize


def window(answers: int, seconds: float = 1.0) -> Window:
    return Window(seconds=seconds, latencies=[0.01] * answers, within_deadline=answers)


def test_three_windows_within_ten_percent_are_stable() -> None:
    assert not stable([window(100), window(100)])
    assert stable([window(50), window(100), window(105), window(96)])
    assert not stable([window(100), window(130), window(100)])
    assert not stable([window(0), window(0), window(0)])


def test_percentiles_interpolate() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == pytest.approx(2.5)
    assert percentile([5.0], 99) == 5.0
    assert math.isnan(percentile([], 50))


def test_summary_over_windows() -> None:
    slow = Window(seconds=2.0, latencies=[0.5, 1.5], within_deadline=1, errors={"UNAVAILABLE": 2})
    summary = summarize([window(4, 2.0), slow])
    assert summary["answered"] == 6 and summary["throughput_rps"] == pytest.approx(1.5)
    assert summary["goodput_rps"] == pytest.approx(1.25) and summary["errors"] == {"UNAVAILABLE": 2}
