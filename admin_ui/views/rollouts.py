"""A model's rollout on the routing page: its step, weights, latest verdict and time to the
next step, refreshed in place while it runs, with pause, resume and abort; and a form to
start one when the route sends all traffic to one version."""

from __future__ import annotations

from typing import Any

import streamlit as st

from ferryman_server.admin_ui.context import Console
from ferryman_server.kernel.canary import Gates
from ferryman_server.registry.accounts import Permission
from ferryman_server.registry.reader import RouteView
from ferryman_server.registry.rollout.status import status
from ferryman_server.registry.rollout.writes import DEFAULT_STEPS
from ferryman_server.registry.states import ROLLOUT_FINISHED, RolloutState
from ferryman_server.registry.validation import RegistryError

REFRESH_S = 2.0
FULL = 100


def running(ctx: Console, model: str) -> bool:
    """Whether the model has an unfinished rollout."""
    found = ctx.reader.rollouts(model, limit=1)
    return bool(found) and RolloutState(found[0].state) not in ROLLOUT_FINISHED


def render(ctx: Console, model: str, route: RouteView | None, versions: list[str]) -> None:
    """The rollout panel of ``model`` (its latest rollout, live), or the form to start one."""
    st.subheader("Rollout")
    live_panel(ctx, model)
    if running(ctx, model) or not ctx.can(Permission.OPERATE):
        return
    live = [v for v, w in route.targets if w > 0] if route else []
    if len(live) != 1:
        st.caption("A rollout starts from one version taking all traffic.")
        return
    candidates = [v for v in versions if v != live[0]]
    if candidates:
        start_form(ctx, model, live[0], candidates)


@st.fragment(run_every=REFRESH_S)
def live_panel(ctx: Console, model: str) -> None:
    found = ctx.reader.rollouts(model, limit=1)
    if not found:
        st.caption("No rollout yet.")
        return
    view = status(found[0])
    finished = RolloutState(view["state"]) in ROLLOUT_FINISHED
    cols = st.columns(4)
    cols[0].metric("State", view["state"])
    cols[1].metric("Step", f"{view['step']} of {len(view['steps'])}")
    cols[2].metric(f"Weight of v{view['candidate']}", f"{view['candidate_weight']}%")
    remaining = view["next_step_in_s"]
    cols[3].metric("Next step in", "-" if remaining is None else f"{remaining:.0f} s")
    st.caption(
        f"v{view['baseline']} -> v{view['candidate']}, steps {view['steps']}, "
        f"at least {view['dwell_s']:g} s each" + (f"; {view['reason']}" if view["reason"] else "")
    )
    check: dict[str, Any] = view["last_check"]
    if check:
        outcome = check.get("outcome", "-")
        reasons = "; ".join(check.get("reasons", [])) or check.get("reason", "")
        (st.error if outcome == "fail" else st.info)(f"latest verdict: {outcome} — {reasons}")
        numbers = {k: v for k, v in check.get("numbers", {}).items() if v is not None}
        if numbers:
            st.dataframe([{"figure": k, "value": f"{v:.4g}"} for k, v in numbers.items()], hide_index=True)
    if finished or not ctx.can(Permission.OPERATE):
        return
    buttons = st.columns(3)
    state = RolloutState(view["state"])
    if state != RolloutState.PAUSED and buttons[0].button("Pause", key="rollout_pause"):
        act(lambda: ctx.writer(Permission.OPERATE).pause_rollout(model), "paused: weights held")
    if state == RolloutState.PAUSED and buttons[1].button("Resume", key="rollout_resume"):
        act(
            lambda: ctx.writer(Permission.OPERATE).resume_rollout(model),
            "resumed: weight returns once the candidate is warm",
        )
    if buttons[2].button("Abort", key="rollout_abort"):
        act(
            lambda: ctx.writer(Permission.OPERATE).abort_rollout(model),
            "aborted: all traffic back on the baseline",
        )


def start_form(ctx: Console, model: str, baseline: str, candidates: list[str]) -> None:
    with st.form("rollout_form"):
        st.caption(f"from v{baseline}, which takes all traffic now")
        candidate = st.selectbox("Candidate version", candidates, key="rollout_candidate")
        steps = st.text_input("Steps (% of traffic)", ",".join(map(str, DEFAULT_STEPS)), key="rollout_steps")
        dwell = st.number_input("Least seconds per step", 1.0, 86400.0, 60.0, key="rollout_dwell")
        min_requests = st.number_input(
            "Requests per version before a verdict", 1, 10**6, 50, key="rollout_min"
        )
        if st.form_submit_button("Start rollout", key="rollout_start"):
            try:
                plan = [int(s) for s in steps.split(",") if s.strip()]
            except ValueError:
                st.error(f"steps must be comma-separated integers, got {steps!r}")
                return
            gates = Gates(min_requests=int(min_requests))
            act(
                lambda: ctx.writer(Permission.OPERATE).start_rollout(
                    model, candidate, steps=plan, dwell_s=float(dwell), gates=gates
                ),
                f"rolling out v{candidate}: it gets weight once warm on its nodes",
            )


def act(write: Any, message: str) -> None:
    try:
        write()
    except RegistryError as exc:
        st.error(str(exc))
        return
    st.session_state["route_flash"] = message
    st.rerun()
