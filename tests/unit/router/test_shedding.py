"""The router's shedding decision: refuse what the recent latency or the batcher's last
overload refusal says cannot make its deadline; probe so a version is never locked out."""

from __future__ import annotations

import pytest

from ferryman_server.router.shedding import Shedder

KEY = "mlp:1"
SMOOTHING = 0.5


def test_nothing_seen_admits_everything() -> None:
    assert Shedder(SMOOTHING).wait(KEY, budget_s=0.001, now=0.0) is None


def test_a_budget_shorter_than_the_recent_latency_is_refused() -> None:
    shedder = Shedder(SMOOTHING)
    shedder.observe(KEY, 0.040)
    assert shedder.wait(KEY, budget_s=0.100, now=0.0) is None
    assert shedder.wait(KEY, budget_s=0.020, now=0.001) == pytest.approx(0.040)


def test_latency_is_a_moving_average() -> None:
    shedder = Shedder(SMOOTHING)
    shedder.observe(KEY, 0.040)
    shedder.observe(KEY, 0.020)  # 0.040 + 0.5 * (0.020 - 0.040)
    assert shedder.wait(KEY, budget_s=0.001, now=0.0) is None  # the first admission of the key
    assert shedder.wait(KEY, budget_s=0.001, now=0.0001) == pytest.approx(0.030)


def test_one_probe_per_latency_period_and_its_answer_resets_the_estimate() -> None:
    shedder = Shedder(SMOOTHING)
    shedder.observe(KEY, 2.0)  # a spike
    assert shedder.wait(KEY, budget_s=0.05, now=10.0) is None  # nothing admitted lately: a probe
    assert shedder.wait(KEY, budget_s=0.05, now=10.1) == pytest.approx(2.0)
    assert shedder.wait(KEY, budget_s=0.05, now=11.9) == pytest.approx(2.0)
    shedder.observe(KEY, 0.010)  # the probe's answer: fast again
    assert shedder.wait(KEY, budget_s=0.05, now=12.0) is None


def test_batcher_pressure_refuses_until_the_wait_drains() -> None:
    shedder = Shedder(SMOOTHING)
    shedder.record(KEY, expected_s=0.080, now=10.0)
    assert shedder.wait(KEY, budget_s=0.050, now=10.010) == pytest.approx(0.070)
    assert shedder.wait(KEY, budget_s=0.100, now=10.010) is None  # a longer budget goes on
    assert shedder.wait(KEY, budget_s=0.050, now=10.031) is None  # 49 ms left < 50 ms budget
    assert shedder.wait(KEY, budget_s=0.001, now=10.081) is None  # drained: forgotten


def test_versions_are_independent() -> None:
    shedder = Shedder(SMOOTHING)
    shedder.record(KEY, expected_s=1.0, now=0.0)
    shedder.observe(KEY, 1.0)
    assert shedder.wait("mlp:2", budget_s=0.01, now=0.0) is None


def test_a_new_refusal_replaces_the_old_one() -> None:
    shedder = Shedder(SMOOTHING)
    shedder.record(KEY, expected_s=1.0, now=0.0)
    shedder.record(KEY, expected_s=0.01, now=0.5)
    assert shedder.wait(KEY, budget_s=0.005, now=0.5) == pytest.approx(0.01)
    assert shedder.wait(KEY, budget_s=0.005, now=0.506) is None


def test_a_budget_below_every_answer_ever_given_is_unmeetable_not_overload() -> None:
    shedder = Shedder(0.5)
    assert not shedder.unmeetable(KEY, 0.001), "nothing known yet"
    for seconds in (0.004, 0.003, 0.009):
        shedder.observe(KEY, seconds)
    assert shedder.unmeetable(KEY, 0.001), "1 ms: even an idle version never answered that fast"
    assert not shedder.unmeetable(KEY, 0.005), "5 ms: refused for load, if at all"
