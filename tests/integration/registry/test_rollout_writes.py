"""Rollouts in the registry (SQLite and PostgreSQL): each transition moves the state and the
route's weights in one audited revision; one live rollout per model, even when two writers
race; the operator's route writes wait for the rollout to end."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from sqlalchemy import Engine

from ferryman_server.kernel.canary import Gates
from ferryman_server.registry.reader import RegistryReader
from ferryman_server.registry.tables import AuditEvent
from ferryman_server.registry.validation import RegistryError
from ferryman_server.registry.writer import RegistryWriter, VersionSpec

GATES = Gates(min_requests=10)
SCHEMA = {
    "inputs": [{"name": "input", "dtype": "FP32", "shape": [4]}],
    "outputs": [{"name": "output", "dtype": "FP32", "shape": [2]}],
}


@pytest.fixture
def writer(registry_engine: Engine, tmp_path: Path) -> RegistryWriter:
    artifact = tmp_path / "model.pt2"
    artifact.write_bytes(b"weights")
    w = RegistryWriter(registry_engine, actor="test")
    for version in ("1", "2", "3"):
        w.register_version(VersionSpec("mlp", version, str(artifact), "torch_export", SCHEMA))
    w.set_route("mlp", {"1": 100}, sticky="user")
    return w


def targets(engine: Engine) -> dict[str, int]:
    route = RegistryReader(engine).route("mlp")
    assert route is not None
    return dict(route.targets)


def test_a_rollout_steps_weights_and_promotes_each_step_one_audited_revision(
    writer: RegistryWriter, registry_engine: Engine
) -> None:
    reader = RegistryReader(registry_engine)
    writer.start_rollout("mlp", "2", steps=[10, 50, 100], dwell_s=5, gates=GATES)
    assert targets(registry_engine) == {"1": 100, "2": 0}  # no weight while warming
    with pytest.raises(RegistryError, match="step 0"):  # a stale check changes nothing
        writer.weigh_rollout("mlp", ["n1"], step=1)
    writer.weigh_rollout("mlp", ["n1"], step=0)
    assert targets(registry_engine) == {"1": 90, "2": 10}
    revision = reader.revision()
    writer.advance_rollout("mlp", {"outcome": "pass"}, step=0)
    assert reader.revision() == revision + 1
    assert targets(registry_engine) == {"1": 50, "2": 50}
    with pytest.raises(RegistryError):  # a second controller's check of the old step
        writer.advance_rollout("mlp", {"outcome": "pass"}, step=0)
    writer.advance_rollout("mlp", {"outcome": "pass"}, step=1)  # into the last step: promoted
    assert targets(registry_engine) == {"2": 100}
    (done,) = reader.rollouts("mlp")
    assert (done.state, done.active_model) == ("PROMOTED", None)
    actions = [e.action for e in reversed(reader.audit_events()) if e.entity == "rollout"]
    assert actions == ["rollout.start", "rollout.weigh", "rollout.advance", "rollout.advance"]
    # Finished: the route is the operator's again, and a new rollout may start.
    writer.set_route("mlp", {"2": 100}, sticky="user")
    # One step of 100: blue-green, switched once the candidate is warm.
    writer.start_rollout("mlp", "3", steps=[100], dwell_s=1, gates=GATES)
    assert writer.weigh_rollout("mlp", ["n1"], step=0).state == "PROMOTED"
    assert targets(registry_engine) == {"3": 100}


def test_a_failed_step_rolls_back_in_one_revision_with_its_verdict(
    writer: RegistryWriter, registry_engine: Engine
) -> None:
    reader = RegistryReader(registry_engine)
    writer.start_rollout("mlp", "2", steps=[20, 100], dwell_s=5, gates=GATES)
    writer.weigh_rollout("mlp", ["n1"], step=0)
    revision = reader.revision()
    verdict = {"outcome": "fail", "reasons": ["server errors"], "numbers": {"canary_error_rate": 0.2}}
    writer.roll_back_rollout("mlp", verdict, "server errors", step=0)
    assert reader.revision() == revision + 1
    assert targets(registry_engine) == {"1": 100, "2": 0}
    event: AuditEvent = reader.audit_events(limit=1)[0]
    assert (event.action, event.detail["state"], event.detail["verdict"]) == (
        "rollout.rollback",
        "ROLLED_BACK",
        verdict,
    )
    with pytest.raises(RegistryError):  # finished: nothing moves it again
        writer.resume_rollout("mlp")


def test_pause_holds_resume_rewarms_and_abort_restores_the_baseline(
    writer: RegistryWriter, registry_engine: Engine
) -> None:
    writer.start_rollout("mlp", "2", steps=[30, 100], dwell_s=5, gates=GATES)
    writer.weigh_rollout("mlp", ["n1"], step=0)
    writer.pause_rollout("mlp", "node n1 stopped serving the candidate")
    assert targets(registry_engine) == {"1": 70, "2": 30}  # held
    with pytest.raises(RegistryError):  # paused: no step moves it
        writer.advance_rollout("mlp", {}, step=0)
    assert writer.resume_rollout("mlp").state == "WARMING"
    writer.abort_rollout("mlp")
    assert targets(registry_engine) == {"1": 100, "2": 0}


def test_one_live_rollout_per_model_and_route_writes_wait_for_it(
    writer: RegistryWriter, registry_engine: Engine
) -> None:
    writer.set_route("mlp", {"1": 50, "2": 50})
    with pytest.raises(RegistryError, match="one version taking all traffic"):
        writer.start_rollout("mlp", "3", dwell_s=5, gates=GATES)
    writer.set_route("mlp", {"1": 100}, sticky="user")
    writer.start_rollout("mlp", "2", dwell_s=5, gates=GATES)
    for write in (
        lambda: writer.start_rollout("mlp", "3", dwell_s=5, gates=GATES),
        lambda: writer.set_route("mlp", {"3": 100}),
        lambda: writer.rollback_route("mlp"),
    ):
        with pytest.raises(RegistryError, match=r"rolling out|already"):
            write()
    writer.abort_rollout("mlp")


def test_two_writers_racing_to_start_leave_exactly_one_rollout(
    writer: RegistryWriter, registry_engine: Engine
) -> None:
    results: list[str] = []
    barrier = threading.Barrier(4)

    def start(candidate: str) -> None:
        barrier.wait()
        try:
            RegistryWriter(registry_engine, actor=f"racer-{candidate}").start_rollout(
                "mlp", candidate, dwell_s=5, gates=GATES
            )
            results.append("started")
        except RegistryError:
            results.append("refused")

    threads = [threading.Thread(target=start, args=(c,)) for c in ("2", "3", "2", "3")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["refused"] * 3 + ["started"]
    assert len(RegistryReader(registry_engine).live_rollouts()) == 1


@pytest.mark.parametrize(
    ("steps", "dwell", "gates"),
    [
        ([5, 1, 100], 5.0, GATES),
        ([10, 100], 0.0, GATES),
        ([10, 100], float("nan"), GATES),
        ([10, 100], 5.0, Gates(alpha=0.0)),
        ([10, 100], 5.0, Gates(max_diff_rate=2.0)),
        ([10, 100], 5.0, Gates(feedback_metric="no spaces allowed")),
        ([10, 100], 5.0, Gates(latency_margin=float("inf"))),
    ],
)
def test_bad_plans_are_refused_and_change_nothing(
    writer: RegistryWriter, registry_engine: Engine, steps: list[int], dwell: float, gates: Gates
) -> None:
    revision = RegistryReader(registry_engine).revision()
    with pytest.raises(RegistryError):
        writer.start_rollout("mlp", "2", steps=steps, dwell_s=dwell, gates=gates)
    assert RegistryReader(registry_engine).revision() == revision
    with pytest.raises(RegistryError):
        writer.start_rollout("mlp", "1", dwell_s=5, gates=GATES)  # already takes all traffic
