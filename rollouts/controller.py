"""The rollout controller: checks every unfinished rollout on a clock, judges the current
step's window from the routers' metrics (and the tenants' feedback), and applies what
``plan.decide`` says through the registry writer.

The window of a step opens at the controller's first check after the step began (its
weights had reached the routers by then), so a restarted controller opens a new window
and the step dwells again: it never judges traffic it did not see start.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ferryman_server.kernel.canary import (
    Gates,
    Moments,
    Verdict,
    combine,
    judge,
    judge_feedback,
    judge_shadow,
    shadow_window,
    version_window,
)
from ferryman_server.kernel.scrape import Samples
from ferryman_server.kernel.telemetry import tracer
from ferryman_server.registry import validation as v
from ferryman_server.registry.reader import RegistryReader
from ferryman_server.registry.rollout.status import candidate_weight
from ferryman_server.registry.snapshot import heartbeat_age_s
from ferryman_server.registry.states import NodeLifecycle, RolloutState
from ferryman_server.registry.tables import Rollout
from ferryman_server.registry.writer import RegistryWriter
from ferryman_server.rollouts.metrics import RolloutMetrics
from ferryman_server.rollouts.plan import Action, Situation, StepPlan, decide
from ferryman_server.rollouts.sources import MetricsSource

log = logging.getLogger("ferryman.rollout")


@dataclass
class _Window:
    opened: Samples
    feedback_since: datetime


class RolloutController:
    def __init__(
        self,
        writer: RegistryWriter,
        reader: RegistryReader,
        metrics_source: MetricsSource,
        metrics: RolloutMetrics,
        *,
        heartbeat_timeout_s: float,
    ) -> None:
        self._writer = writer
        self._reader = reader
        self._source = metrics_source
        self._metrics = metrics
        self._heartbeat_timeout_s = heartbeat_timeout_s
        self._windows: dict[tuple[int, str], _Window] = {}
        self._tracer = tracer("ferryman.rollout")

    async def run(self, stop: asyncio.Event, every_s: float) -> None:
        """Check until ``stop``; a check that fails (registry or metrics unreachable) is
        logged and the next one tries again: weights stay where they are meanwhile."""
        while not stop.is_set():
            try:
                await self.check()
            except Exception:
                log.exception("rollout check failed; weights unchanged")
            try:
                async with asyncio.timeout(every_s):
                    await stop.wait()
            except TimeoutError:
                pass

    async def check(self) -> dict[str, StepPlan]:
        """One check of every unfinished rollout: model -> what was decided."""
        rollouts = await asyncio.to_thread(self._reader.live_rollouts)
        live = {(r.id or 0, _started(r)) for r in rollouts}
        self._windows = {key: w for key, w in self._windows.items() if key in live}
        if not rollouts:
            return {}
        ready, serving = await asyncio.to_thread(self._nodes)
        samples: Samples | None = None
        if any(r.state == RolloutState.RUNNING for r in rollouts):
            try:
                samples = await asyncio.to_thread(self._source)
            except OSError as exc:
                log.warning("cannot read router metrics (%s): no verdict this check", exc)
        decisions: dict[str, StepPlan] = {}
        for rollout in rollouts:
            placed = await asyncio.to_thread(self._reader.placed_on, rollout.model, rollout.candidate)
            placed_ready = ready if "*" in placed else ready & set(placed)
            verdict = await self._verdict(rollout, samples)
            situation = Situation(
                state=RolloutState(rollout.state),
                dwell_s=rollout.dwell_s,
                since_step_s=_since(rollout),
                placed_nodes=placed_ready,
                serving_nodes=serving.get(f"{rollout.model}:{rollout.candidate}", set()),
                weighed_nodes=rollout.nodes,
                verdict=verdict,
            )
            decision = decide(situation)
            decisions[rollout.model] = decision
            await asyncio.to_thread(self._apply, rollout, decision, situation)
        return decisions

    def _nodes(self) -> tuple[set[str], dict[str, set[str]]]:
        """Ready nodes with fresh heartbeats, and ``model:version`` -> those serving it."""
        now = datetime.now(UTC)
        ready: set[str] = set()
        serving: dict[str, set[str]] = {}
        for node in self._reader.nodes():
            if (
                node.lifecycle != NodeLifecycle.READY
                or heartbeat_age_s(node, now) > self._heartbeat_timeout_s
            ):
                continue
            ready.add(node.name)
            for key in node.loaded_versions:
                serving.setdefault(key, set()).add(node.name)
        return ready, serving

    async def _verdict(self, rollout: Rollout, samples: Samples | None) -> Verdict | None:
        if rollout.state != RolloutState.RUNNING or samples is None:
            return None
        key = (rollout.id or 0, _started(rollout))
        window = self._windows.get(key)
        gates = Gates(**rollout.gates)
        if window is None:
            if _since(rollout) < gates.warmup_s:
                return None  # the step's first seconds: the candidate still warms up
            self._windows[key] = _Window(samples, datetime.now(UTC))
            return None
        verdicts = [
            judge(
                version_window(window.opened, samples, rollout.model, rollout.baseline),
                version_window(window.opened, samples, rollout.model, rollout.candidate),
                gates,
            ),
            judge_shadow(*shadow_window(window.opened, samples, rollout.model, rollout.candidate), gates),
        ]
        if gates.feedback_metric:
            moments = await asyncio.to_thread(
                self._reader.feedback_moments, rollout.model, gates.feedback_metric, window.feedback_since
            )
            none = Moments(0.0, 0.0, 0.0)
            verdicts.append(
                judge_feedback(
                    moments.get(rollout.baseline, none), moments.get(rollout.candidate, none), gates
                )
            )
        return combine(verdicts)

    def _apply(self, rollout: Rollout, decision: StepPlan, situation: Situation) -> None:
        """Write what was decided; a transition an operator made meanwhile wins (the state
        machine refuses ours) and the next check starts from it."""
        model, verdict = rollout.model, situation.verdict
        detail: dict[str, Any] = verdict.as_dict() if verdict is not None else {}
        check = {"action": decision.action.value, "reason": decision.reason, "at": _now_iso(), **detail}
        # Before the transition: a finished rollout takes no more checks, and its last one
        # should be the verdict that ended it.
        self._writer.record_rollout_check(model, check)
        try:
            if decision.action == Action.WEIGH:
                rollout = self._writer.weigh_rollout(
                    model, sorted(situation.serving_nodes), step=rollout.step
                )
            elif decision.action == Action.ADVANCE:
                rollout = self._writer.advance_rollout(model, detail, step=rollout.step)
            elif decision.action == Action.ROLL_BACK:
                rollout = self._writer.roll_back_rollout(model, detail, decision.reason, step=rollout.step)
            elif decision.action == Action.PAUSE:
                rollout = self._writer.pause_rollout(model, decision.reason)
        except v.RegistryError as exc:
            log.info("rollout of %s moved meanwhile: %s", model, exc)
            return
        weight = candidate_weight(rollout)
        self._metrics.weight.labels(model, rollout.baseline, rollout.candidate).set(weight)
        if verdict is not None:
            self._metrics.checks.labels(model, verdict.outcome.value).inc()
        if decision.action == Action.WAIT:
            return
        self._metrics.events.labels(model, decision.action.value).inc()
        with self._tracer.start_as_current_span(f"rollout.{decision.action.value}") as span:
            span.set_attributes(
                {
                    "ferryman.model": model,
                    "ferryman.rollout.baseline": rollout.baseline,
                    "ferryman.rollout.candidate": rollout.candidate,
                    "ferryman.rollout.state": rollout.state,
                    "ferryman.rollout.weight": weight,
                }
            )
            span.add_event(decision.action.value, {"reason": decision.reason})
            # Inside the span: the line carries its trace id.
            log.info(
                "rollout %s %s -> %s: %s (%s)",
                model,
                rollout.baseline,
                rollout.candidate,
                decision.action.value,
                decision.reason,
                extra={"fields": {"model": model, "state": rollout.state, "weight": weight, "check": check}},
            )


def _started(rollout: Rollout) -> str:
    return rollout.step_started_at.isoformat() if rollout.step_started_at else ""


def _since(rollout: Rollout) -> float:
    started = rollout.step_started_at
    if started is None:
        return 0.0
    if started.tzinfo is None:  # SQLite hands back naive UTC
        started = started.replace(tzinfo=UTC)
    return (datetime.now(UTC) - started).total_seconds()


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
