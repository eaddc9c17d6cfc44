"""What a rollout check does next: a pure function of the rollout, the clock, the nodes
and the verdict (the controller gathers those and applies the decision)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from enum import StrEnum

from ferryman_server.kernel.canary import Outcome, Verdict
from ferryman_server.registry.states import RolloutState


class Action(StrEnum):
    WAIT = "wait"
    WEIGH = "weigh"  # warm: give the candidate the current step's weight
    ADVANCE = "advance"  # the step passed (after the last one: promote)
    ROLL_BACK = "roll_back"
    PAUSE = "pause"


@dataclass(frozen=True)
class Situation:
    state: RolloutState
    dwell_s: float
    since_step_s: float
    """Seconds the current step has run (0 while warming)."""
    placed_nodes: Collection[str]
    """Ready nodes the candidate is placed on (by name or ``*``)."""
    serving_nodes: Collection[str]
    """Ready nodes serving the candidate (warm: they report it loaded)."""
    weighed_nodes: Sequence[str]
    """Nodes that served it when it got weight."""
    verdict: Verdict | None
    """The analysis of the current step's window so far; None before there is one."""


@dataclass(frozen=True)
class StepPlan:
    """What one check of a rollout does next, and why (shown to operators as is)."""

    action: Action
    reason: str


def decide(s: Situation) -> StepPlan:
    """The next move of one rollout."""
    if s.state == RolloutState.WARMING:
        cold = sorted(set(s.placed_nodes) - set(s.serving_nodes))
        if not s.serving_nodes:
            return StepPlan(Action.WAIT, "no ready node serves the candidate yet")
        if cold:
            return StepPlan(Action.WAIT, f"warming on {', '.join(cold)}")
        return StepPlan(Action.WEIGH, f"warm on {', '.join(sorted(s.serving_nodes))}")
    if s.state != RolloutState.RUNNING:
        return StepPlan(Action.WAIT, f"{s.state.value.lower()}")
    lost = [node for node in s.weighed_nodes if node not in s.serving_nodes]
    if lost:
        return StepPlan(Action.PAUSE, f"node {', '.join(lost)} stopped serving the candidate")
    if s.verdict is None:
        return StepPlan(Action.WAIT, "collecting the first window")
    if s.verdict.outcome == Outcome.FAIL:
        return StepPlan(Action.ROLL_BACK, "; ".join(s.verdict.reasons))
    if s.since_step_s < s.dwell_s:
        return StepPlan(Action.WAIT, f"dwelling ({s.dwell_s - s.since_step_s:.0f} s to go)")
    if s.verdict.outcome == Outcome.PASS:
        return StepPlan(Action.ADVANCE, "; ".join(s.verdict.reasons) or "passed")
    return StepPlan(Action.WAIT, "; ".join(s.verdict.reasons))
