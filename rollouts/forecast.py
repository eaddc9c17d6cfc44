"""Capacity ahead of known traffic: a pool's demand forecast from its own history, and the
replicas it needs ready by then. Pure functions of a demand series (one value a step,
oldest first) and a policy, so a replayed synthetic week tests them exactly.

A replica asked for now serves only after ``lead_s`` (the pod starts, the model loads and
warms up), so scaling on what is seen now is always ``lead_s`` late for a rise, and has to
hold its replicas through every dip (a stabilisation window) because it cannot tell a dip
from the fall. The forecast looks at the same moments one, two and three seasons ago (a
week, else a day), scaled by how today compares with them so far, and asks now for what
will be needed when a replica started now is ready. The reactive signal stays beside it
for what history does not know (a spike).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

DAY_S = 86_400.0
WEEK_S = 7 * DAY_S
LEVEL_CLAMP = (0.5, 2.0)
"""Today's level against past seasons is trusted this far (a holiday, a launch)."""


@dataclass(frozen=True)
class CapacityPolicy:
    """How a pool's demand becomes replicas."""

    per_replica: float
    """Demand (requests a second) one replica serves at its target utilisation."""
    step_s: float = 300.0
    """The history's resolution."""
    lead_s: float = 600.0
    """From asking for a replica to its serving (start, load, warm-up)."""
    headroom: float = 1.2
    """Capacity kept above the demand (bursts within a step)."""
    min_replicas: int = 0
    max_replicas: int = 64
    seasons_s: tuple[float, ...] = (WEEK_S, DAY_S)
    """Seasons tried longest first: the first with enough history is used."""
    lookback: int = 3
    """Past seasons compared (the median of them: one odd day does not steer)."""
    level_window_s: float = 3_600.0
    """How much of today is compared with the same hours of past seasons."""
    stabilisation_s: float = 1_800.0
    """Reactive scaling keeps the most replicas it wanted over this long before scaling
    down (HPA's scale-down stabilisation window)."""

    @property
    def lead_steps(self) -> int:
        return max(1, math.ceil(self.lead_s / self.step_s))

    def replicas(self, demand: float) -> int:
        """Replicas that serve ``demand`` with the headroom, within the pool's bounds."""
        wanted = math.ceil(max(0.0, demand) * self.headroom / self.per_replica - 1e-9)
        return min(self.max_replicas, max(self.min_replicas, wanted))


Demand = Sequence[float | None]
"""One value a step, oldest first; None where nothing is known (a gap in the scrapes, or
before the retention): never read as zero demand."""

MIN_LEVEL_KNOWN = 0.5
"""Of a level window's steps, the share that must be known for it to be compared."""


def known_mean(values: Sequence[float | None]) -> float | None:
    """The mean of the known values, None when too few are known to stand for the window."""
    known = [v for v in values if v is not None]
    if not values or len(known) < MIN_LEVEL_KNOWN * len(values):
        return None
    return statistics.fmean(known)


def forecast(history: Demand, policy: CapacityPolicy) -> float | None:
    """The highest demand expected from the next step until a replica asked for now is
    ready (``lead_s``) and one step beyond; None without a season whose past moments are
    known (missing history stays missing: the caller then stays reactive)."""
    now = len(history) - 1
    ahead = range(now + 1, now + policy.lead_steps + 2)
    level_steps = max(1, round(policy.level_window_s / policy.step_s))
    today = known_mean(history[now - level_steps + 1 : now + 1]) if now >= 0 else None
    for season_s in policy.seasons_s:
        season = round(season_s / policy.step_s)
        peaks, levels = [], []
        for k in range(1, policy.lookback + 1):
            back = [t - k * season for t in ahead]
            if back[0] - level_steps < 0 or back[-1] > now:
                break
            moments = [history[t] for t in back]
            level = known_mean(history[now - k * season - level_steps + 1 : now - k * season + 1])
            if any(m is None for m in moments) or level is None:
                continue  # that season was not scraped (a gap, or before the retention)
            peaks.append(max(m for m in moments if m is not None))
            levels.append(level)
        if not peaks:
            continue
        past_level = statistics.median(levels)
        ratio = today / past_level if today is not None and past_level > 0 else 1.0
        return statistics.median(peaks) * min(LEVEL_CLAMP[1], max(LEVEL_CLAMP[0], ratio))
    return None


def latest(history: Demand, steps: int = 1) -> float:
    """The highest known demand of the last ``steps`` steps (0 when none is known)."""
    return max((v for v in history[-steps:] if v is not None), default=0.0)


Decide = Callable[[Demand], int]
"""Demand so far -> replicas wanted now."""


def reactive(policy: CapacityPolicy) -> Decide:
    """What HPA/KEDA do on a demand signal: the replicas for what is seen now, scaled down
    only once the stabilisation window has passed without wanting more."""
    window = max(1, round(policy.stabilisation_s / policy.step_s))

    def decide(history: Demand) -> int:
        return policy.replicas(latest(history, window))

    return decide


def predictive(policy: CapacityPolicy) -> Decide:
    """The forecast's replicas, the reactive signal's when it asks more (a spike history
    does not know); reactive alone until there is a season of history."""
    fallback = reactive(policy)

    def decide(history: Demand) -> int:
        expected = forecast(history, policy)
        if expected is None:
            return fallback(history)
        return max(policy.replicas(expected), policy.replicas(latest(history)))

    return decide


@dataclass(frozen=True)
class Replay:
    """A policy over a replayed demand series."""

    refused: float
    """Requests beyond the ready replicas' capacity."""
    served: float
    idle_replica_hours: float
    """Ready replicas' hours beyond what the demand needed (at full utilisation)."""
    replica_hours: float


def replay(demand: Sequence[float], decide: Decide, policy: CapacityPolicy, start: int) -> Replay:
    """Run ``decide`` at every step of ``demand`` (it sees only the past), a replica asked
    for becoming ready ``lead_steps`` later and one given back at once; score the steps
    from ``start`` on."""
    ready_at: list[int] = []
    """When each replica that is asked for (ready or not) serves."""
    refused = served = idle = hours = 0.0
    step_h = policy.step_s / 3600
    for t in range(len(demand)):
        target = decide(demand[: t + 1])
        if target > len(ready_at):
            ready_at += [t + policy.lead_steps] * (target - len(ready_at))
        else:  # give back the latest asked first: those not ready yet go first
            ready_at = sorted(ready_at)[:target]
        if t < start:
            continue
        ready = sum(1 for at in ready_at if at <= t)
        capacity = ready * policy.per_replica
        refused += max(0.0, demand[t] - capacity) * policy.step_s
        served += min(demand[t], capacity) * policy.step_s
        idle += max(0.0, ready - demand[t] / policy.per_replica) * step_h
        hours += ready * step_h
    return Replay(refused, served, idle, hours)
