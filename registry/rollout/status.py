"""A rollout as the CLI and the console show it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ferryman_server.registry.rollout.writes import FULL
from ferryman_server.registry.states import RolloutState
from ferryman_server.registry.tables import Rollout


def candidate_weight(rollout: Rollout) -> int:
    """The weight the candidate has now."""
    state = RolloutState(rollout.state)
    if state == RolloutState.PROMOTED:
        return FULL
    if state in (RolloutState.RUNNING, RolloutState.PAUSED) and rollout.step_started_at is not None:
        return rollout.steps[rollout.step]
    return 0


def status(rollout: Rollout, now: datetime | None = None) -> dict[str, Any]:
    """State, step, weights, the latest verdict and the least time to the next step."""
    now = now or datetime.now(UTC)
    started = rollout.step_started_at
    if started is not None and started.tzinfo is None:  # SQLite hands back naive UTC
        started = started.replace(tzinfo=UTC)
    remaining = None
    if rollout.state == RolloutState.RUNNING and started is not None:
        remaining = max(0.0, rollout.dwell_s - (now - started).total_seconds())
    return {
        "model": rollout.model,
        "baseline": rollout.baseline,
        "candidate": rollout.candidate,
        "state": rollout.state,
        "step": rollout.step + 1,
        "steps": list(rollout.steps),
        "candidate_weight": candidate_weight(rollout),
        "dwell_s": rollout.dwell_s,
        "next_step_in_s": remaining,
        "nodes": list(rollout.nodes),
        "gates": dict(rollout.gates),
        "last_check": dict(rollout.last_check),
        "reason": rollout.reason,
        "started_at": rollout.created_at.isoformat(),
    }
