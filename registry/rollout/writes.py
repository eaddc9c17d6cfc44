"""Rollout writes (part of ``RegistryWriter``): each transition moves the rollout's state
and the route's weights in one transaction, so one registry revision carries both to every
router, and the audit event holds the verdict that caused it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from sqlmodel import Session

from ferryman_server.kernel.canary import Gates
from ferryman_server.registry import rows
from ferryman_server.registry import validation as v
from ferryman_server.registry.change import Change, WriterBase
from ferryman_server.registry.route_writes import live_rollout, write_targets
from ferryman_server.registry.states import RolloutState, VersionStatus, next_rollout_state
from ferryman_server.registry.tables import Rollout, utcnow

FULL = 100
MAX_STEPS = 20
MAX_DWELL_S = 86_400.0
DEFAULT_STEPS = (1, 5, 25, 50, 100)


def check_steps(steps: Sequence[int]) -> list[int]:
    """Candidate weights per step: 1..20 of them, rising strictly, ending at 100."""
    if not 1 <= len(steps) <= MAX_STEPS:
        raise v.RegistryError(f"a rollout has 1..{MAX_STEPS} steps, got {len(steps)}")
    if any(not 0 < s <= FULL for s in steps) or list(steps) != sorted(set(steps)):
        raise v.RegistryError(f"steps must rise strictly within 1..100, got {list(steps)}")
    if steps[-1] != FULL:
        raise v.RegistryError(f"the last step must be 100, got {steps[-1]}")
    return list(steps)


def check_gates(gates: Gates) -> Gates:
    """Thresholds within their meaningful ranges."""
    finite = [
        gates.alpha,
        gates.max_error_increase,
        gates.latency_margin,
        gates.min_latency_increase,
        gates.warmup_s,
        gates.feedback_margin,
    ]
    if not all(math.isfinite(x) for x in finite):
        raise v.RegistryError("gate thresholds must be finite numbers")
    if not 1 <= gates.min_requests <= 1_000_000_000:
        raise v.RegistryError("min requests must be 1..1e9")
    if not 0 < gates.alpha <= 0.5:
        raise v.RegistryError("alpha must be in (0, 0.5]")
    if not 0 <= gates.max_error_increase <= 1 or not 0 <= gates.latency_margin <= 0.5:
        raise v.RegistryError("max error increase must be 0..1 and the latency margin 0..0.5")
    if not 0 <= gates.min_latency_increase <= 10:
        raise v.RegistryError("the minimum latency increase must be 0..10 (a share: 0.2 is 20%)")
    if not 0 <= gates.warmup_s <= 3600:
        raise v.RegistryError("the warm-up must be 0..3600 s")
    if gates.max_diff_rate is not None and not 0 <= gates.max_diff_rate <= 1:
        raise v.RegistryError("max diff rate must be 0..1")
    if gates.feedback_metric:
        v.check_name("feedback metric", gates.feedback_metric)
    if gates.feedback_margin < 0:
        raise v.RegistryError("the feedback margin cannot be negative")
    return gates


def _weights(rollout: Rollout, candidate_weight: int) -> dict[str, int]:
    """The two versions' weights, the baseline first: on a sticky route the candidate's
    buckets are the top ones and only grow, so a caller moved to it stays there."""
    if candidate_weight >= FULL:
        return {rollout.candidate: FULL}
    return {rollout.baseline: FULL - candidate_weight, rollout.candidate: candidate_weight}


class RolloutWrites(WriterBase):
    def start_rollout(
        self,
        model: str,
        candidate: str,
        *,
        steps: Sequence[int] = DEFAULT_STEPS,
        dwell_s: float,
        gates: Gates,
    ) -> Rollout:
        """Start moving ``model`` from the version that takes all its traffic to
        ``candidate``. The candidate gets weight 0 until it is warm on its nodes."""
        plan = check_steps(steps)
        if not 0 < dwell_s <= MAX_DWELL_S:
            raise v.RegistryError(f"dwell must be in (0, {MAX_DWELL_S:g}] seconds")
        check_gates(gates)
        with self._change("rollout.start", "rollout", model) as c:
            model_row = rows.model(c.session, model)
            if (running := live_rollout(c.session, model)) is not None:
                raise v.RegistryError(
                    f"{model!r} is already rolling out {running.baseline} -> {running.candidate}"
                )
            route = rows.route(c.session, model_row)
            live = [(t["version"], t["weight"]) for t in route.targets if t["weight"] > 0] if route else []
            if len(live) != 1:
                shown = ", ".join(f"{ver}={w}" for ver, w in live) or "no route"
                raise v.RegistryError(f"a rollout starts from one version taking all traffic ({shown})")
            baseline = str(live[0][0])
            if candidate == baseline:
                raise v.RegistryError(f"{model}:{candidate} already takes all traffic")
            if rows.version(c.session, model, candidate).status == VersionStatus.RETIRED:
                raise v.RegistryError(f"version {model}:{candidate} is retired")
            rollout = Rollout(
                model=model,
                active_model=model,
                baseline=baseline,
                candidate=candidate,
                steps=plan,
                state=RolloutState.WARMING.value,
                dwell_s=dwell_s,
                gates=asdict(gates),
            )
            c.session.add(rollout)
            write_targets(c, model_row, _weights(rollout, 0))
            c.detail.update(
                baseline=baseline, candidate=candidate, steps=plan, dwell_s=dwell_s, gates=asdict(gates)
            )
        return rollout

    def weigh_rollout(self, model: str, nodes: Sequence[str], *, step: int) -> Rollout:
        """The candidate is warm on ``nodes``: give it the weight of ``step`` (the current
        one: a check that saw an older state changes nothing)."""
        with self._change("rollout.weigh", "rollout", model) as c:
            rollout = _live(c, model, RolloutState.RUNNING, step)
            rollout.nodes = sorted(nodes)
            self._set_step(c, rollout, rollout.step)
        return rollout

    def advance_rollout(self, model: str, verdict: dict[str, Any], *, step: int) -> Rollout:
        """``step`` passed: the next step's weight; the last step (100) is the promotion
        (the candidate alone on the route, the baseline with no weight)."""
        with self._change("rollout.advance", "rollout", model) as c:
            rollout = _live(c, model, RolloutState.RUNNING, step)
            c.detail["verdict"] = verdict
            self._set_step(c, rollout, rollout.step + 1)
        return rollout

    def roll_back_rollout(self, model: str, verdict: dict[str, Any], reason: str, *, step: int) -> Rollout:
        """``step`` failed its analysis: all traffic back on the baseline, with the verdict."""
        with self._change("rollout.rollback", "rollout", model) as c:
            rollout = _live(c, model, RolloutState.ROLLED_BACK, step)
            c.detail["verdict"] = verdict
            self._finish(c, rollout, RolloutState.ROLLED_BACK, reason)
            write_targets(c, rows.model(c.session, model), _weights(rollout, 0))
        return rollout

    def pause_rollout(self, model: str, reason: str = "paused by an operator") -> Rollout:
        """Hold the weights where they are until resumed."""
        with self._change("rollout.pause", "rollout", model) as c:
            rollout = _live(c, model, RolloutState.PAUSED)
            rollout.reason = reason
            c.detail["reason"] = reason
        return rollout

    def resume_rollout(self, model: str) -> Rollout:
        """Go on from the step it paused at, once the candidate is warm again."""
        with self._change("rollout.resume", "rollout", model) as c:
            rollout = _live(c, model, RolloutState.WARMING)
            rollout.reason = ""
        return rollout

    def abort_rollout(self, model: str, reason: str = "aborted by an operator") -> Rollout:
        """End the rollout with all traffic back on the baseline."""
        with self._change("rollout.abort", "rollout", model) as c:
            rollout = _live(c, model, RolloutState.ABORTED)
            self._finish(c, rollout, RolloutState.ABORTED, reason)
            write_targets(c, rows.model(c.session, model), _weights(rollout, 0))
        return rollout

    def record_rollout_check(self, model: str, check: dict[str, Any]) -> None:
        """The latest verdict, for status and the console (operational: no revision, no audit)."""
        with Session(self._engine) as session:
            rollout = live_rollout(session, model)
            if rollout is not None:
                rollout.last_check = check
                session.add(rollout)
                session.commit()

    @staticmethod
    def _set_step(c: Change, rollout: Rollout, step: int) -> None:
        """Weigh ``step``; reaching 100 % promotes (there is no baseline left to compare)."""
        rollout.step = step
        rollout.step_started_at = rollout.updated_at = utcnow()
        c.session.add(rollout)
        weight = rollout.steps[step]
        write_targets(c, rows.model(c.session, rollout.model), _weights(rollout, weight))
        c.detail.update(step=step, weight=weight, nodes=list(rollout.nodes))
        if weight == FULL:
            RolloutWrites._finish(c, rollout, RolloutState.PROMOTED, "every step passed")

    @staticmethod
    def _finish(c: Change, rollout: Rollout, state: RolloutState, reason: str) -> None:
        rollout.state = state.value
        rollout.active_model = None
        rollout.reason = reason
        rollout.updated_at = utcnow()
        c.session.add(rollout)
        c.detail.update(state=state.value, reason=reason)


def _live(c: Change, model: str, target: RolloutState, step: int | None = None) -> Rollout:
    """The model's unfinished rollout, moved to ``target``: refused if it may not go there,
    or if it is no longer at ``step`` (a controller's check that another one overtook)."""
    rollout = live_rollout(c.session, model, lock=True)
    if rollout is None:
        raise v.NotFound(f"{model!r} has no rollout in progress")
    if step is not None and rollout.step != step:
        raise v.RegistryError(f"the rollout of {model!r} is at step {rollout.step}, not {step}")
    current = RolloutState(rollout.state)
    rollout.state = next_rollout_state(current, target).value
    rollout.updated_at = utcnow()
    c.session.add(rollout)
    c.detail.update(
        baseline=rollout.baseline, candidate=rollout.candidate, from_state=current.value, state=rollout.state
    )
    return rollout
