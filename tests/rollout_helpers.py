"""Helpers of the rollout and experiment tests: sticky-user traffic that records which
version answered each request, the rollout CLI, and waits on a rollout's state."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import numpy as np
from router_platform import E2E

from ferryman.tensors import encode
from ferryman.v1 import common_pb2, inference_pb2, inference_pb2_grpc
from ferryman_server.registry.reader import RegistryReader

CHECK_S = 0.2
"""How often the tests' rollout controller checks."""
SENDERS = 8
USERS_PER_SENDER = 40
DWELL_S = 1.5
WARMUP_S = 0.3
"""Of each step, not judged: the tests' versions are warm (they served the warm-up)."""
MIN_REQUESTS = 20
STEPS = "20,50,100"
SETTLE_S = 2.0
"""After a rollback: the router's next registry refresh, with margin."""
DONE_S = 90.0
SLOW_MS = 40
FAIL_SHARE = 0.2
"""The share of live inputs the faulty test version fails on."""
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
    react: Callable[[inference_pb2.PredictResponse], None] | None = None
    """Called with each answer in its sender's thread (a client reporting outcomes)."""
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
                if self.react is not None:
                    self.react(reply)
            except grpc.RpcError as exc:
                self.sent.append(Sent(user, at, "", exc.code().name))


def near_share(observed: float, expected: float, samples: int, sigmas: float = 4.0) -> bool:
    """Whether a share observed over ``samples`` independent draws is within ``sigmas``
    binomial standard errors of ``expected``: traffic's inputs are random, so a share seen
    over a rollout step's few dozen requests spreads that far (at 28 requests, 10 failures
    where 5.6 are expected is two standard errors: a fixed band flakes)."""
    return abs(observed - expected) <= sigmas * math.sqrt(expected * (1 - expected) / samples)


def wait_done(reader: RegistryReader, model: str, timeout_s: float = DONE_S) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        rollout = reader.rollouts(model, limit=1)[0]
        if rollout.active_model is None:
            return rollout.state
        time.sleep(CHECK_S)
    rollout = reader.rollouts(model, limit=1)[0]
    raise AssertionError(
        f"rollout of {model} still {rollout.state} at step {rollout.step}: {rollout.last_check}"
    )


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
    command = [sys.executable, "-m", "ferryman_server.cli", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)


def start(e2e: E2E, model: str, to: str, *extra: str, steps: str = STEPS) -> None:
    """``ferryman rollout start`` with the tests' short steps (``extra``: more options)."""
    args = ["rollout", "start", model, "--to", to, "--steps", steps, "--dwell", str(DWELL_S)]
    done = cli(e2e, *args, "--min-requests", str(MIN_REQUESTS), "--warmup", str(WARMUP_S), *extra, "--json")
    assert done.returncode == 0, done.stderr


def rollout_events(reader: RegistryReader, model: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        (e.action, e.detail)
        for e in reversed(reader.audit_events(limit=200))
        if e.entity == "rollout" and e.entity_key == model
    ]
