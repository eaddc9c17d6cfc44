"""The capacity forecast on synthetic daily and weekly patterns, and predictive against
reactive scaling on a replayed week (the figures docs/benchmarks.md reports)."""

from __future__ import annotations

import math

from bench.scenarios.capacity_forecast import score, synthetic
from ferryman_server.rollouts.forecast import DAY_S, CapacityPolicy, forecast, predictive, reactive

POLICY = CapacityPolicy(per_replica=10.0, step_s=3600.0, lead_s=7200.0, headroom=1.0, seasons_s=(DAY_S,))


def daily(days: int) -> list[float]:
    """One value an hour: 10 at night, 100 from 9:00 to 17:00."""
    return [100.0 if 9 <= h % 24 < 17 else 10.0 for h in range(days * 24)]


def test_a_daily_pattern_is_forecast_before_it_rises() -> None:
    history = daily(3)[: 2 * 24 + 6]  # day 3, 05:00: quiet now, busy from 09:00
    assert history[-1] == 10.0
    # A replica asked now serves from 07:00; the forecast covers until 08:00: not the rise.
    assert forecast(history, POLICY) == 10.0
    history = daily(3)[: 2 * 24 + 7]  # 06:00: one asked now serves from 08:00, into 09:00
    assert forecast(history, POLICY) == 100.0
    assert POLICY.replicas(100.0) == 10


def test_without_a_season_of_history_there_is_no_forecast() -> None:
    assert forecast(daily(1)[:20], POLICY) is None
    decide = predictive(POLICY)
    assert decide(daily(1)[:20]) == reactive(POLICY)(daily(1)[:20])


def test_todays_level_scales_the_seasons() -> None:
    history = daily(3)
    busier = [v * 1.5 for v in history[:-5]] + [v * 1.5 for v in history[-5:]]
    assert math.isclose(forecast(busier, POLICY) or 0, 1.5 * (forecast(history, POLICY) or 0))


def test_a_weekly_season_knows_monday_from_sunday() -> None:
    weekly = CapacityPolicy(per_replica=10.0, step_s=3600.0, lead_s=7200.0, headroom=1.0)
    weeks = [0.0 if (h // 24) % 7 >= 5 else v for h, v in enumerate(daily(14))]
    # Week 3, Monday 07:00 after a quiet weekend: the daily season alone would expect
    # Sunday's nothing; the weekly one expects last Monday's rise. The level window is
    # an hour of a quiet morning, the same as past Mondays'.
    monday = weeks + [10.0] * 8
    assert forecast(monday, weekly) == 100.0


def test_predictive_beats_reactive_on_refusals_and_idle_capacity() -> None:
    results = score(synthetic(seed=0), CapacityPolicy(per_replica=50.0))
    ahead, behind = results["predictive"], results["reactive"]
    assert ahead.refused < behind.refused / 5
    assert ahead.idle_replica_hours < behind.idle_replica_hours


def test_replicas_stay_within_the_pools_bounds() -> None:
    bounded = CapacityPolicy(per_replica=10.0, min_replicas=1, max_replicas=4)
    assert bounded.replicas(0.0) == 1
    assert bounded.replicas(1_000.0) == 4
    assert bounded.replicas(10.0) == 2, "headroom 1.2 over one replica's 10"


def test_missing_history_is_not_zero_demand() -> None:
    """Prometheus had no sample (a scrape gap, or before its retention): those steps are
    unknown. The seasons they fall in are not compared, instead of forecasting a quiet day."""
    history: list[float | None] = list(daily(3)[: 2 * 24 + 7])  # 06:00: busy from 09:00
    assert forecast(history, POLICY) == 100.0
    gap = list(history)
    gap[24 + 7 : 24 + 10] = [None] * 3  # yesterday's rise was not scraped
    assert forecast(gap, POLICY) == 100.0, "the day before yesterday still knows the rise"
    both = list(gap)
    both[7:10] = [None] * 3  # neither past day was scraped then
    assert forecast(both, POLICY) is None
    decide = predictive(POLICY)
    assert decide(both) == reactive(POLICY)(both) == POLICY.replicas(10.0), "reactive, not zero"


def test_a_retention_shorter_than_the_seasons_stays_reactive() -> None:
    """With Prometheus' default 15 days, three weekly seasons back are never all known: the
    missing ones are left out; with under a week known there is no weekly forecast at all."""
    weekly = CapacityPolicy(
        per_replica=10.0, step_s=3600.0, lead_s=7200.0, headroom=1.0, seasons_s=(7 * DAY_S,)
    )
    weeks = daily(21)[: 20 * 24 + 7]
    retained: list[float | None] = [None] * (len(weeks) - 15 * 24) + list(weeks[-15 * 24 :])
    assert forecast(retained, weekly) == 100.0, "two weeks back are known: they forecast"
    short: list[float | None] = [None] * (len(weeks) - 5 * 24) + list(weeks[-5 * 24 :])
    assert forecast(short, weekly) is None
    assert predictive(weekly)(short) == reactive(weekly)(short) == weekly.replicas(10.0)
