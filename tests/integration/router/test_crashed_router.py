"""Request ids on the chart's topology (two routers sharing quotas in Redis): what an
ordinary SDK call leaves in the store, and a router killed with requests in flight."""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import redis
from batcher_platform import REGISTRY_REFRESH_S, register, wait_for_replicas
from figures import report
from router_platform import ECHO_HANDLER, wait_known
from topology import NODES, Topology

from ferryman.sdk import Client
from ferryman.sdk.errors import AnswerNotKept
from ferryman_server.gpu_node.demo import echo
from ferryman_server.registry.db import make_engine
from ferryman_server.registry.reader import RegistryReader
from ferryman_server.registry.specs import QuotaLimits

pytestmark = [pytest.mark.slow, pytest.mark.abuse]

CALLS = 10
GLACIAL_MS = 3000
"""Long enough that a router is surely killed while its requests run."""
PER_CALL_BYTES = 600
"""What one ordinary SDK call may leave in Redis: its reservation, no answer (an answer
kept for every call left ~2.8 KB per minilm call)."""
WAIT_S = 60.0


@pytest.fixture
def store(topology: Topology) -> redis.Redis:
    return redis.Redis.from_url(topology.quota_redis)


def limited_tenant(topology: Topology, prefix: str) -> tuple[str, str]:
    """A new tenant with an rpm limit (so every request of it is counted in Redis)."""
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    writer = topology.e2e.writer
    key = writer.create_tenant(name).plaintext
    writer.set_quota(name, QuotaLimits(rpm=10_000))
    wait_known(topology.routers, key)
    time.sleep(REGISTRY_REFRESH_S * 3)  # the quota policy: a later write, a later refresh
    return name, key


def reservations(store: redis.Redis, tenant: str) -> dict[str, dict[bytes, bytes]]:
    return {
        key.decode(): store.hgetall(key)  # type: ignore[misc]
        for key in store.scan_iter(match=f"fm:q:res:{tenant}/*", count=1000)
    }


def test_ordinary_sdk_calls_keep_no_answer_and_explicit_ids_do(
    topology: Topology, store: redis.Redis
) -> None:
    """An SDK call with no id of the application's binds its own id (a retry is charged once)
    but keeps no answer; an id the application chose keeps it, and its repeat gets it."""
    tenant, key = limited_tenant(topology, "ids")
    with Client(topology.e2e.router, api_key=key) as client:
        first = client.predict("minilm", {"text": ["sentence 0 " * 8]})
        for i in range(1, 20):
            client.predict("minilm", {"text": [f"sentence {i} " * 8]})
        kept = client.predict("minilm", {"text": ["mine"]}, request_id="mine-1")
        again = client.predict("minilm", {"text": ["mine"]}, request_id="mine-1")
    held = reservations(store, tenant)
    assert len(held) == 21
    ordinary = {k: v for k, v in held.items() if not k.endswith("/mine-1")}
    assert all(b"answer" not in fields for fields in ordinary.values())
    sizes = [int(store.memory_usage(k) or 0) for k in ordinary]
    report("redis bytes per ordinary sdk call", most=max(sizes), mean=sum(sizes) // len(sizes))
    assert max(sizes) <= PER_CALL_BYTES, sizes
    assert held[f"fm:q:res:{tenant}/mine-1"][b"answer"]
    assert np.array_equal(kept.outputs["embedding"], again.outputs["embedding"])
    # A repeat of an ordinary call's id after it was answered is not run again.
    with Client(topology.e2e.router, api_key=key) as client, pytest.raises(AnswerNotKept):
        client.predict("minilm", {"text": ["sentence 0 " * 8]}, request_id=first.request_id)


def test_a_router_killed_mid_request_is_ridden_out_and_charged_once(
    topology: Topology, store: redis.Redis
) -> None:
    """kill -9 of the router running 10 slow requests: the SDK's retries (same ids) reach the
    other router, which takes each reservation over once its lease has run out; every call
    is answered, and each is charged once. Last in this module: nothing restarts the router."""
    writer = topology.e2e.writer
    artifact = echo.write_config(topology.e2e.common.data_dir / "glacial.json", delay_ms=GLACIAL_MS)
    register(writer, "echo", "glacial", artifact, "python", echo.SCHEMA, handler=ECHO_HANDLER, max_batch=16)
    engine = make_engine(topology.e2e.registry_url)
    try:
        wait_for_replicas(RegistryReader(engine), NODES, {"echo:glacial"})
    finally:
        engine.dispose()
    tenant, key = limited_tenant(topology, "crash")
    rows = [np.full(echo.WIDTH, i, dtype=np.float32) for i in range(CALLS)]
    started = threading.Barrier(CALLS + 1)

    def call(row: np.ndarray) -> np.ndarray:
        # Default settings, but the target names both routers, as a Kubernetes Service does.
        with Client(topology.target, api_key=key) as client:
            started.wait()
            output = client.predict("echo", {"input": row[None, :]}, version="glacial").outputs["output"]
        assert isinstance(output, np.ndarray)
        return output

    with ThreadPoolExecutor(CALLS) as pool:
        answers = [pool.submit(call, row) for row in rows]
        started.wait()
        deadline = time.monotonic() + WAIT_S
        while sum(f[b"state"] == b"reserved" for f in reservations(store, tenant).values()) < CALLS:
            assert time.monotonic() < deadline, reservations(store, tenant)
            time.sleep(0.05)
        topology.kill("router-0")
        killed = time.monotonic()
        results = [a.result(timeout=WAIT_S) for a in answers]
    report(
        "router kill -9 mid-request",
        answered=len(results),
        last_answer_after_kill_s=round(time.monotonic() - killed, 1),
    )
    for row, result in zip(rows, results, strict=True):
        assert np.array_equal(result[0], row * 2)  # echo doubles
    # Each settles off its answer's path: once all have, every one was settled, none twice.
    deadline = time.monotonic() + WAIT_S
    held = reservations(store, tenant)
    while not all(f[b"state"] == b"settled" for f in held.values()):
        assert time.monotonic() < deadline, held
        time.sleep(0.1)
        held = reservations(store, tenant)
    assert len(held) == CALLS
    assert store.zcard(f"fm:q:{{{tenant}}}:{tenant}:log") == CALLS, "each request admitted once"
