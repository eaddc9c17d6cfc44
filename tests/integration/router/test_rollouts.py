"""Progressive rollouts over the real platform (gRPC, nodes running torch, the registry): the
controller steps a healthy version to promotion with sticky users never flipping back, rolls
a faulty or slower one back at its first step with the verdict in the audit log, holds a
cold candidate at weight 0 until its node serves it, and pauses when that node goes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import grpc
import numpy as np
import pytest
from batcher_platform import node_main, register, wait_for_replicas
from harness import ServiceThread
from router_platform import E2E, ECHO_HANDLER

from ferryman.kernel.net import free_port
from ferryman.tensors import encode
from ferryman.v1 import common_pb2, inference_pb2, inference_pb2_grpc
from gpu_node.demo import echo, mlp
from registry.reader import RegistryReader
from registry.rollout.server import serve_rollouts
from registry.rollout.settings import RolloutSettings
from router.routing import bucket

SENDERS = 8
USERS_PER_SENDER = 40
CHECK_S = 0.2
DWELL_S = 1.5
MIN_REQUESTS = 20
STEPS = "20,50,100"
SETTLE_S = 2.0
"""After a rollback: the router's next registry refresh, with margin."""
DONE_S = 90.0
SLOW_MS = 40
LIVE_OFFSET = 100.0
"""Echo traffic's values sit here, above anything warm-up sends: the faulty version fails
on live inputs only, as a model that passed its warm-up may."""


@dataclass
class Sent:
    user: str
    at: float
    version: str
    code: str


@dataclass
class Traffic:
    """Closed-loop requests from sticky users, each user's requests one after another."""

    e2e: E2E
    model: str
    width: int
    offset: float = 0.0
    stop: threading.Event = field(default_factory=threading.Event)
    sent: list[Sent] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)

    def __enter__(self) -> Traffic:
        for i in range(SENDERS):
            thread = threading.Thread(target=self._send, args=(i,), daemon=True)
            thread.start()
            self.threads.append(thread)
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=30)

    def _send(self, sender: int) -> None:
        stub = inference_pb2_grpc.InferenceStub(grpc.insecure_channel(self.e2e.router))
        metadata = [("authorization", f"Bearer {self.e2e.keys['acme']}")]
        rng = np.random.default_rng(sender)
        users = [f"user-{sender}-{j}" for j in range(USERS_PER_SENDER)]
        n = 0
        while not self.stop.is_set():
            user = users[n % len(users)]
            n += 1
            x = (
                rng.standard_normal((1, self.width), dtype=np.float32) + self.offset
            )  # distinct: nothing coalesces
            request = inference_pb2.PredictRequest(
                model=self.model, user=user, inputs=[common_pb2.NamedTensor(name="input", tensor=encode(x))]
            )
            at = time.monotonic()
            try:
                reply = stub.Predict(request, metadata=metadata, timeout=30)
                self.sent.append(Sent(user, at, reply.version, "OK"))
            except grpc.RpcError as exc:
                self.sent.append(Sent(user, at, "", exc.code().name))


@pytest.fixture(scope="module")
def controller(e2e: E2E) -> Iterator[RegistryReader]:
    """The rollout models on every node, and a controller watching the router's metrics."""
    writer, fx = e2e.writer, e2e.common.data_dir / "rollouts"
    mlp_path = e2e.common.data_dir / "artifacts" / "mlp.pt2"
    for version in ("1", "2"):
        register(writer, "roll-mlp", version, mlp_path, "torch_export", mlp.SCHEMA, max_batch=64, delay_ms=5)
    writer.set_route("roll-mlp", {"1": 100}, sticky="user")
    variants = {
        "1": echo.write_config(fx / "plain.json"),
        "faulty": echo.write_config(fx / "faulty.json", fail_share=0.2, fail_above=LIVE_OFFSET / 2),
        "slow": echo.write_config(fx / "slow.json", delay_ms=SLOW_MS),
    }
    for version, path in variants.items():
        register(writer, "roll-echo", version, path, "python", echo.SCHEMA, handler=ECHO_HANDLER, delay_ms=2)
    writer.set_route("roll-echo", {"1": 100}, sticky="user")
    # Placed on a node that is not running yet: it stays cold.
    register(writer, "roll-late", "1", variants["1"], "python", echo.SCHEMA, handler=ECHO_HANDLER)
    register(
        writer, "roll-late", "2", variants["1"], "python", echo.SCHEMA, handler=ECHO_HANDLER, nodes=("rn3",)
    )
    writer.set_route("roll-late", {"1": 100}, sticky="user")
    reader = RegistryReader(writer._engine)
    keys = {f"roll-mlp:{v}" for v in ("1", "2")} | {f"roll-echo:{v}" for v in variants} | {"roll-late:1"}
    wait_for_replicas(reader, ("rn1", "rn2"), keys)
    settings = RolloutSettings(listen="127.0.0.1:0", router_metrics=[e2e.router_metrics], check_s=CHECK_S)
    thread = ServiceThread(lambda stop, ready: serve_rollouts(settings, e2e.common, stop, ready), "rollouts")
    thread.start()
    try:
        yield reader
    finally:
        thread.stop()


def wait_done(reader: RegistryReader, model: str, timeout_s: float = DONE_S) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        rollout = reader.rollouts(model, limit=1)[0]
        if rollout.active_model is None:
            return rollout.state
        time.sleep(CHECK_S)
    rollout = reader.rollouts(model, limit=1)[0]
    raise AssertionError(f"rollout of {model} still {rollout.state} at step {rollout.step}: {rollout.last_check}")


def wait_state(reader: RegistryReader, model: str, state: str, timeout_s: float = DONE_S) -> None:
    deadline = time.monotonic() + timeout_s
    while reader.rollouts(model, limit=1)[0].state != state:
        assert time.monotonic() < deadline, reader.rollouts(model, limit=1)[0].state
        time.sleep(CHECK_S)


def cli(e2e: E2E, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "FERRYMAN_DATABASE_URL": e2e.registry_url,
        "FERRYMAN_DATA_DIR": str(e2e.common.data_dir),
    }
    command = [sys.executable, "-m", "ferryman", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)


def start(e2e: E2E, model: str, to: str) -> None:
    args = ["rollout", "start", model, "--to", to, "--steps", STEPS, "--dwell", str(DWELL_S)]
    done = cli(e2e, *args, "--min-requests", str(MIN_REQUESTS), "--json")
    assert done.returncode == 0, done.stderr


def rollout_events(reader: RegistryReader, model: str) -> list[tuple[str, dict[str, object]]]:
    return [
        (e.action, e.detail)
        for e in reversed(reader.audit_events(limit=200))
        if e.entity == "rollout" and e.entity_key == model
    ]


def test_a_healthy_version_is_promoted_and_sticky_users_never_flip_back(
    e2e: E2E, controller: RegistryReader
) -> None:
    with Traffic(e2e, "roll-mlp", mlp.IN_FEATURES) as traffic:
        start(e2e, "roll-mlp", "2")
        state = wait_done(controller, "roll-mlp")
        promoted = time.monotonic()
        time.sleep(SETTLE_S * 2)
    assert state == "PROMOTED", controller.rollouts("roll-mlp", 1)[0].last_check
    route = controller.route("roll-mlp")
    assert route is not None and dict(route.targets) == {"2": 100}
    actions = [action for action, _ in rollout_events(controller, "roll-mlp")]
    assert actions == ["rollout.start", "rollout.weigh", "rollout.advance", "rollout.advance"]
    verdicts = [
        detail["verdict"] for action, detail in rollout_events(controller, "roll-mlp") if "verdict" in detail
    ]
    assert all(v["outcome"] == "pass" and v["numbers"]["canary_requests"] >= MIN_REQUESTS for v in verdicts)
    assert all(s.code == "OK" for s in traffic.sent)
    history: dict[str, list[str]] = {}
    for s in sorted(traffic.sent, key=lambda s: s.at):
        history.setdefault(s.user, []).append(s.version)
    for user, versions in history.items():
        moved = versions.index("2") if "2" in versions else len(versions)
        assert set(versions[moved:]) <= {"2"}, (user, versions)
    after = [s.version for s in traffic.sent if s.at > promoted + SETTLE_S]
    assert after and set(after) == {"2"}  # promoted: everyone is on 2


def test_a_faulty_version_is_rolled_back_at_its_first_step_failing_only_its_own_requests(
    e2e: E2E, controller: RegistryReader
) -> None:
    with Traffic(e2e, "roll-echo", echo.WIDTH, LIVE_OFFSET) as traffic:
        start(e2e, "roll-echo", "faulty")
        assert wait_done(controller, "roll-echo") == "ROLLED_BACK"
        rolled_back = time.monotonic()
        time.sleep(SETTLE_S * 2)
    rollout = controller.rollouts("roll-echo", 1)[0]
    assert rollout.step == 0  # the first step (20 %)
    action, detail = rollout_events(controller, "roll-echo")[-1]
    assert action == "rollout.rollback"
    verdict = detail["verdict"]
    assert isinstance(verdict, dict) and verdict["outcome"] == "fail"
    assert "server errors" in " ".join(verdict["reasons"]), verdict
    assert 0.1 < verdict["numbers"]["canary_error_rate"] < 0.35
    assert verdict["numbers"]["baseline_error_rate"] == 0
    route = controller.route("roll-echo")
    assert route is not None and dict(route.targets) == {"1": 100, "faulty": 0}
    failed = [s for s in traffic.sent if s.code != "OK"]
    assert failed, "the faulty version answered during its step"
    # Every failure was a request the faulty version served: its user's bucket was in the
    # candidate's 20 %, and none came after the rollback reached the router.
    assert all(bucket(route.salt, f"user:{s.user}") >= 80 for s in failed)
    assert all(s.code == "INTERNAL" for s in failed)
    assert not [s for s in failed if s.at > rolled_back + SETTLE_S]
    assert [s for s in traffic.sent if s.at > rolled_back + SETTLE_S], "traffic went on"


def test_a_version_that_is_only_slower_fails_the_latency_gate(e2e: E2E, controller: RegistryReader) -> None:
    with Traffic(e2e, "roll-echo", echo.WIDTH, LIVE_OFFSET) as traffic:
        start(e2e, "roll-echo", "slow")
        assert wait_done(controller, "roll-echo") == "ROLLED_BACK"
    _, detail = rollout_events(controller, "roll-echo")[-1]
    verdict = detail["verdict"]
    assert isinstance(verdict, dict)
    assert any("slower" in reason for reason in verdict["reasons"]), verdict
    numbers = verdict["numbers"]
    # Twice as slow per batch; the baseline shares its nodes (and this machine's two cores
    # with the senders), so the measured ratio is noisier than the gate's decision.
    assert numbers["canary_p50_ms"] > numbers["baseline_p50_ms"], numbers
    assert numbers["p_canary_slower"] > 0.6, numbers
    assert numbers["canary_error_rate"] == 0
    assert all(s.code == "OK" for s in traffic.sent)


def test_a_cold_candidate_waits_for_its_node_and_a_lost_node_pauses_the_rollout(
    e2e: E2E, controller: RegistryReader
) -> None:
    start(e2e, "roll-late", "2")
    time.sleep(CHECK_S * 10)
    rollout = controller.rollouts("roll-late", 1)[0]
    assert rollout.state == "WARMING"
    assert "no ready node" in rollout.last_check.get("reason", "")
    route = controller.route("roll-late")
    assert route is not None and dict(route.targets) == {"1": 100, "2": 0}
    node = ServiceThread(node_main("rn3", e2e.common, f"127.0.0.1:{free_port()}"), "rn3")
    node.start()
    try:
        wait_state(controller, "roll-late", "RUNNING")
        rollout = controller.rollouts("roll-late", 1)[0]
        assert rollout.nodes == ["rn3"]
        route = controller.route("roll-late")
        assert route is not None and dict(route.targets) == {"1": 80, "2": 20}
    finally:
        node.stop()
    wait_state(controller, "roll-late", "PAUSED")
    rollout = controller.rollouts("roll-late", 1)[0]
    assert "rn3" in rollout.reason
    route = controller.route("roll-late")
    assert route is not None and dict(route.targets) == {"1": 80, "2": 20}  # held, not rolled back
    done = cli(e2e, "rollout", "abort", "roll-late", "--json")
    assert done.returncode == 0, done.stderr
    route = controller.route("roll-late")
    assert route is not None and dict(route.targets) == {"1": 100, "2": 0}
    status = cli(e2e, "rollout", "status", "roll-late", "--json")
    assert '"state": "ABORTED"' in status.stdout
