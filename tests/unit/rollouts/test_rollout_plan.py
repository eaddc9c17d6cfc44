"""The rollout's per-check decision, its state machine, and sticky assignment under its
weights: pure, no database."""

from __future__ import annotations

import pytest

from ferryman_server.kernel.canary import Outcome, Verdict
from ferryman_server.registry.rollout.writes import check_steps
from ferryman_server.registry.snapshot import RouteRecord
from ferryman_server.registry.states import InvalidTransition, RolloutState, next_rollout_state
from ferryman_server.registry.validation import RegistryError
from ferryman_server.rollouts.plan import Action, Situation, decide
from ferryman_server.router.routing import choose

PASS = Verdict(Outcome.PASS, ["fine"])
FAIL = Verdict(Outcome.FAIL, ["server errors +20.00% over the baseline's (p=1e-09)"])
WAIT = Verdict(Outcome.INCONCLUSIVE, ["too few requests"])


def situation(**changes: object) -> Situation:
    base: dict[str, object] = {
        "state": RolloutState.RUNNING,
        "dwell_s": 10.0,
        "since_step_s": 11.0,
        "placed_nodes": {"n1", "n2"},
        "serving_nodes": {"n1", "n2"},
        "weighed_nodes": ["n1", "n2"],
        "verdict": PASS,
    }
    base.update(changes)
    return Situation(**base)  # type: ignore[arg-type]


def test_a_cold_candidate_gets_no_weight_until_every_placed_node_serves_it() -> None:
    assert decide(situation(state=RolloutState.WARMING, serving_nodes=set())).action == Action.WAIT
    warming = decide(situation(state=RolloutState.WARMING, serving_nodes={"n1"}))
    assert warming.action == Action.WAIT and "n2" in warming.reason
    assert decide(situation(state=RolloutState.WARMING)).action == Action.WEIGH


def test_a_passing_step_advances_only_after_its_dwell() -> None:
    assert decide(situation(since_step_s=3.0)).action == Action.WAIT
    assert decide(situation()).action == Action.ADVANCE


def test_a_failing_step_rolls_back_at_once_with_the_reason() -> None:
    decision = decide(situation(since_step_s=1.0, verdict=FAIL))
    assert decision.action == Action.ROLL_BACK
    assert "server errors" in decision.reason


def test_doubt_and_no_window_wait() -> None:
    assert decide(situation(verdict=WAIT)).action == Action.WAIT
    assert decide(situation(verdict=None)).action == Action.WAIT


def test_a_node_lost_during_the_rollout_pauses_it_before_any_verdict() -> None:
    decision = decide(situation(serving_nodes={"n1"}, verdict=FAIL))
    assert decision.action == Action.PAUSE
    assert "n2" in decision.reason


@pytest.mark.parametrize("state", [RolloutState.PAUSED, RolloutState.PROMOTED, RolloutState.ABORTED])
def test_a_rollout_not_running_is_left_alone(state: RolloutState) -> None:
    assert decide(situation(state=state, verdict=FAIL)).action == Action.WAIT


def test_the_state_machine_allows_only_its_transitions() -> None:
    assert next_rollout_state(RolloutState.PAUSED, RolloutState.WARMING) == RolloutState.WARMING
    for finished in (RolloutState.PROMOTED, RolloutState.ROLLED_BACK, RolloutState.ABORTED):
        with pytest.raises(InvalidTransition):
            next_rollout_state(finished, RolloutState.RUNNING)
    with pytest.raises(InvalidTransition):  # a paused rollout resumes through warming
        next_rollout_state(RolloutState.PAUSED, RolloutState.RUNNING)
    with pytest.raises(InvalidTransition):  # no promotion without weight
        next_rollout_state(RolloutState.WARMING, RolloutState.PROMOTED)


@pytest.mark.parametrize(
    "steps", [[], [5, 1, 100], [1, 1, 100], [0, 100], [1, 50], [50, 101], list(range(1, 101))]
)
def test_bad_steps_are_refused(steps: list[int]) -> None:
    with pytest.raises(RegistryError):
        check_steps(steps)


def test_sticky_callers_only_ever_move_to_the_candidate_as_its_weight_grows() -> None:
    weights = [(100, 0), (99, 1), (95, 5), (75, 25), (50, 50)]
    users = [f"user-{i}" for i in range(2000)]
    seen: dict[str, list[str]] = {u: [] for u in users}
    for base, canary in weights:
        route = RouteRecord("m", (("1", base), ("2", canary)), "user", "salt", "")
        for user in users:
            seen[user].append(choose(route, tenant="t", user=user))
    promoted = RouteRecord("m", (("2", 100),), "user", "salt", "")
    for user in users:
        history = [*seen[user], choose(promoted, tenant="t", user=user)]
        first = history.index("2")
        assert all(v == "2" for v in history[first:]), (user, history)
    share = sum(seen[u][3] == "2" for u in users) / len(users)
    assert 0.2 < share < 0.3
