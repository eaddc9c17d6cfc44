"""The router's shedding decision: refuse while the batcher's predicted wait exceeds the budget."""

from __future__ import annotations

import pytest

from router.shedding import Shedder

KEY = "mlp:1"


def test_no_refusal_seen_admits_everything() -> None:
    assert Shedder().wait(KEY, budget_s=0.001, now=0.0) is None


def test_a_shorter_budget_than_the_remaining_wait_is_refused_with_that_wait() -> None:
    shedder = Shedder()
    shedder.record(KEY, expected_s=0.080, now=10.0)
    assert shedder.wait(KEY, budget_s=0.050, now=10.010) == pytest.approx(0.070)


def test_a_longer_budget_goes_to_the_batcher() -> None:
    shedder = Shedder()
    shedder.record(KEY, expected_s=0.080, now=10.0)
    assert shedder.wait(KEY, budget_s=0.100, now=10.0) is None


def test_the_wait_drains_with_time_until_the_batcher_is_asked_again() -> None:
    shedder = Shedder()
    shedder.record(KEY, expected_s=0.080, now=10.0)
    assert shedder.wait(KEY, budget_s=0.050, now=10.020) is not None
    assert shedder.wait(KEY, budget_s=0.050, now=10.031) is None  # 49 ms left < 50 ms budget
    assert shedder.wait(KEY, budget_s=0.001, now=10.081) is None  # fully drained: forgotten
    assert shedder.wait(KEY, budget_s=0.001, now=10.082) is None


def test_versions_are_independent() -> None:
    shedder = Shedder()
    shedder.record(KEY, expected_s=1.0, now=0.0)
    assert shedder.wait("mlp:2", budget_s=0.01, now=0.0) is None


def test_a_new_refusal_replaces_the_old_one() -> None:
    shedder = Shedder()
    shedder.record(KEY, expected_s=1.0, now=0.0)
    shedder.record(KEY, expected_s=0.01, now=0.5)
    assert shedder.wait(KEY, budget_s=0.005, now=0.5) == pytest.approx(0.01)
    assert shedder.wait(KEY, budget_s=0.005, now=0.506) is None
