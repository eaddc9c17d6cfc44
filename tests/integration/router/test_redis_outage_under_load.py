"""Under steady load, Redis (the quota backend) stops for 5 s: each router answers by its fail
mode (closed: UNAVAILABLE at once; open: admit), nobody waits for Redis to come back, and
quotas work again after."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import numpy as np
import pytest
from figures import report
from router_platform import E2E
from services import start_redis, wait_for_redis

from ferryman.tensors import encode
from ferryman.v1 import common_pb2, inference_pb2, inference_pb2_grpc
from ferryman_server.gpu_node.demo import echo
from ferryman_server.kernel.net import free_port
from ferryman_server.quota.settings import QuotaSettings
from ferryman_server.registry.specs import QuotaLimits

# Left out of make test-fast: Redis stopped under load.
pytestmark = pytest.mark.slow

CLIENTS = 4
BEFORE_S = 1.0
OUTAGE_S = 5.0
AFTER_S = 3.0
SNAPSHOT_WAIT_S = 1.0
EDGE_S = 0.1
"""Requests sent this close to a stop or start may reach the quota check on either side of it."""


@dataclass
class Outcome:
    sent_at: float
    seconds: float
    code: grpc.StatusCode


@dataclass
class Timeline:
    outcomes: list[Outcome] = field(default_factory=list)
    stopped_at: float = 0.0
    """When Redis was told to stop (requests sent before it found Redis up)."""
    restarted_at: float = 0.0
    """When Redis was started again (recovery counts from here, its start-up included)."""

    def during(self, start: float, end: float) -> list[Outcome]:
        return [o for o in self.outcomes if start <= o.sent_at < end]


def load_through_outage(router: str, key: str, port: int, workdir: Path) -> Timeline:
    """CLIENTS closed-loop clients while Redis runs, stops for OUTAGE_S, and runs again."""
    stub = inference_pb2_grpc.InferenceStub(grpc.insecure_channel(router))
    metadata = (("authorization", f"Bearer {key}"),)
    request = inference_pb2.PredictRequest(
        model="echo",
        inputs=[common_pb2.NamedTensor(name="input", tensor=encode(np.ones((1, echo.WIDTH), np.float32)))],
    )
    timeline = Timeline()
    ends = time.monotonic() + BEFORE_S + OUTAGE_S + AFTER_S

    def client() -> None:
        while time.monotonic() < ends:
            sent = time.monotonic()
            try:
                stub.Predict(request, metadata=metadata, timeout=10)
                code = grpc.StatusCode.OK
            except grpc.RpcError as error:
                code = error.code()
            timeline.outcomes.append(Outcome(sent, time.monotonic() - sent, code))

    redis = start_redis(port, workdir)
    assert wait_for_redis(port)
    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(BEFORE_S)
        timeline.stopped_at = time.monotonic()
        redis.terminate()
        redis.wait(10)
        time.sleep(OUTAGE_S)
        timeline.restarted_at = time.monotonic()
        redis = start_redis(port, workdir)
        assert wait_for_redis(port)
        for thread in threads:
            thread.join()
    finally:
        redis.terminate()
        redis.wait(10)
    return timeline


@pytest.mark.parametrize("fail_mode", ["closed", "open"])
def test_redis_outage_under_load(e2e: E2E, tmp_path: Path, fail_mode: str) -> None:
    port = free_port()
    tenant = f"redis-{fail_mode}"
    key = e2e.writer.create_tenant(tenant).plaintext
    e2e.writer.set_quota(tenant, QuotaLimits(rpm=1_000_000))  # a limit, so Redis is asked every time
    settings = QuotaSettings(
        backend="redis",
        redis_url=f"redis://127.0.0.1:{port}/0",
        fail_mode=fail_mode,
    )
    router, _ = e2e.start_router(settings)
    time.sleep(SNAPSHOT_WAIT_S)
    timeline = load_through_outage(router, key, port, tmp_path)

    slowest = max(o.seconds for o in timeline.outcomes)
    # Nobody hangs on the missing backend: each call is decided within the quota's backend
    # timeout (a fraction of a second), so what was sent in the outage's first half is
    # answered before Redis is back. (A 1 s bound on the slowest answer failed on a loaded
    # machine at 1.15 s; whether anyone waited for Redis does not depend on the load.)
    waited = [o for o in timeline.outcomes if o.sent_at < timeline.restarted_at - OUTAGE_S / 2]
    late = [o for o in waited if o.sent_at + o.seconds >= timeline.restarted_at]
    assert not late, f"{len(late)} request(s) waited for Redis to come back (slowest {slowest:.2f} s)"
    before = timeline.during(0, timeline.stopped_at - EDGE_S)
    assert before and all(o.code == grpc.StatusCode.OK for o in before)
    outage = timeline.during(timeline.stopped_at + EDGE_S, timeline.restarted_at - EDGE_S)
    expected = grpc.StatusCode.UNAVAILABLE if fail_mode == "closed" else grpc.StatusCode.OK
    assert outage and all(o.code == expected for o in outage), {o.code for o in outage}
    after = timeline.during(timeline.restarted_at, float("inf"))
    # Recovered while the load went on after the restart (how soon is a figure, not a bound).
    assert any(o.code == grpc.StatusCode.OK for o in after), "quota never recovered after Redis came back"
    first_ok = min(o.sent_at for o in after if o.code == grpc.StatusCode.OK)
    recovery_s = first_ok - timeline.restarted_at
    last_failure = max((o.sent_at for o in after if o.code != grpc.StatusCode.OK), default=first_ok)
    assert all(o.code == grpc.StatusCode.OK for o in after if o.sent_at > last_failure)
    report(
        f"redis outage ({fail_mode})",
        requests=len(timeline.outcomes),
        during_outage=len(outage),
        outage_codes=sorted({o.code.name for o in outage}),
        slowest_answer_ms=round(slowest * 1000, 1),
        recovery_s=round(max(recovery_s, last_failure - timeline.restarted_at), 2),
    )
