"""Predictive against reactive scaling on a replayed synthetic month: ``python -m
bench.scenarios.capacity_forecast``.

The demand is a working week's shape (quiet nights, a morning ramp, a lunch peak, an
evening fall, quieter weekends) with noise, deterministic from its seed. Three weeks are
history; the fourth is scored. Reactive is what HPA/KEDA do on the demand they see (the
replicas for now, held through the stabilisation window before scaling down); predictive
asks now for what ``ferryman_server.rollouts.forecast`` expects when a replica started now is
ready, with the reactive signal as its floor. A replica serves ``lead_s`` after it is
asked for.
"""

from __future__ import annotations

import argparse
import math
import random

from ferryman_server.rollouts.forecast import DAY_S, CapacityPolicy, Replay, predictive, reactive, replay

WEEKS = 4
POLICY = CapacityPolicy(per_replica=50.0, step_s=300.0, lead_s=600.0)


def weekday_shape(hour: float) -> float:
    """Requests a second across a working day (peaks near 250 at lunch, 20 at night)."""
    night, day = 20.0, 200.0
    morning = 1 / (1 + math.exp(-(hour - 8.5) * 2.5))
    evening = 1 / (1 + math.exp((hour - 18.5) * 1.5))
    lunch = 50.0 * math.exp(-(((hour - 12.5) / 0.8) ** 2))
    return night + (day - night) * morning * evening + lunch


def synthetic(weeks: int = WEEKS, seed: int = 0, step_s: float = POLICY.step_s) -> list[float]:
    """Demand a step, oldest first: weekdays as ``weekday_shape``, weekends at 30%, with
    10% noise and a slow 2% a week growth."""
    rng = random.Random(seed)
    steps = round(weeks * 7 * DAY_S / step_s)
    series = []
    for t in range(steps):
        seconds = t * step_s
        day, hour = int(seconds // DAY_S), (seconds % DAY_S) / 3600
        weekend = day % 7 >= 5
        growth = 1 + 0.02 * seconds / (7 * DAY_S)
        base = weekday_shape(hour) * (0.3 if weekend else 1.0) * growth
        series.append(max(0.0, base * rng.gauss(1.0, 0.1)))
    return series


def score(demand: list[float], policy: CapacityPolicy) -> dict[str, Replay]:
    """Both policies over the last week of ``demand``."""
    start = len(demand) - round(7 * DAY_S / policy.step_s)
    return {
        "reactive": replay(demand, reactive(policy), policy, start),
        "predictive": replay(demand, predictive(policy), policy, start),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lead-s", type=float, default=POLICY.lead_s)
    parser.add_argument("--stabilisation-s", type=float, default=POLICY.stabilisation_s)
    args = parser.parse_args()
    policy = CapacityPolicy(
        per_replica=POLICY.per_replica,
        step_s=POLICY.step_s,
        lead_s=args.lead_s,
        stabilisation_s=args.stabilisation_s,
    )
    demand = synthetic(seed=args.seed, step_s=policy.step_s)
    print("| scaling | refused requests | refused % | replica-hours | idle replica-hours |")
    print("|---|---:|---:|---:|---:|")
    for name, result in score(demand, policy).items():
        total = result.refused + result.served
        print(
            f"| {name} | {result.refused:,.0f} | {100 * result.refused / total:.2f}% "
            f"| {result.replica_hours:,.1f} | {result.idle_replica_hours:,.1f} |"
        )


if __name__ == "__main__":
    main()
