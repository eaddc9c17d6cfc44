"""The forecaster's loop with a fake history: what it publishes for KEDA, and that an
unreadable Prometheus keeps the last forecast rather than dropping a pool to zero."""

from __future__ import annotations

from bench.scenarios.capacity_forecast import synthetic
from ferryman_server.rollouts.capacity import CapacityForecaster, series_values
from ferryman_server.rollouts.forecast import CapacityPolicy, forecast
from ferryman_server.rollouts.metrics import RolloutMetrics

POLICY = CapacityPolicy(per_replica=50.0)
QUERY = 'sum(rate(ferryman_requests_total{model="m"}[5m]))'


def test_each_pool_publishes_the_replicas_its_forecast_needs() -> None:
    demand = synthetic(weeks=4)
    asked: list[tuple[str, float, float]] = []

    def history(query: str, back_s: float, step_s: float) -> list[float]:
        asked.append((query, back_s, step_s))
        return demand

    metrics = RolloutMetrics()
    published = CapacityForecaster({"gpu": QUERY}, history, POLICY, metrics).check()
    expected = POLICY.replicas(forecast(demand, POLICY) or 0)
    assert published == {"gpu": expected} and expected > 0
    assert metrics.registry.get_sample_value("ferryman_forecast_replicas", {"pool": "gpu"}) == expected
    ((query, back_s, step_s),) = asked
    assert query == QUERY and step_s == POLICY.step_s
    assert back_s >= 3 * 7 * 86_400, "three weeks back: the weekly season's lookback"


def test_an_unreadable_history_keeps_the_last_forecast() -> None:
    metrics = RolloutMetrics()
    calls = 0

    def history(query: str, back_s: float, step_s: float) -> list[float]:
        nonlocal calls
        calls += 1
        if calls > 1:
            raise OSError("connection refused")
        return synthetic(weeks=4)

    forecaster = CapacityForecaster({"gpu": QUERY}, history, POLICY, metrics)
    first = forecaster.check()
    assert forecaster.check() == {}
    assert metrics.registry.get_sample_value("ferryman_forecast_replicas", {"pool": "gpu"}) == first["gpu"]


def test_a_range_query_is_summed_per_step_and_gaps_stay_unknown() -> None:
    result = [
        {"metric": {"pod": "a"}, "values": [[1000, "1.5"], [1600, "2"], [1900, "0"]]},
        {"metric": {"pod": "b"}, "values": [[1000, "0.5"], [1300, "NaN"]]},
    ]
    assert series_values(result, 1000.0, 300.0, 5) == [2.0, None, 2.0, 0.0, None]


def test_a_pool_with_no_known_history_publishes_its_floor_not_a_guess() -> None:
    metrics = RolloutMetrics()

    def history(query: str, back_s: float, step_s: float) -> list[float | None]:
        return [None] * 10

    assert CapacityForecaster({"gpu": QUERY}, history, POLICY, metrics).check() == {
        "gpu": POLICY.min_replicas
    }
