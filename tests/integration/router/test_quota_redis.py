"""Quotas on real Redis: exact request limits across routers, bounded cost overshoot,
idempotent settles, and the configured fail mode while Redis is down."""

from __future__ import annotations

import asyncio
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np
import pytest
import redis
import redis.asyncio as aioredis
from router_platform import E2E
from services import start_redis, wait_for_redis

from ferryman.tensors import encode
from ferryman.v1 import common_pb2, inference_pb2, inference_pb2_grpc
from ferryman_server.gpu_node.demo import echo
from ferryman_server.kernel.net import free_port
from ferryman_server.kernel.quota import Ask, Decision, QuotaUnavailable, ReserveCall
from ferryman_server.quota.redis_backend import RedisQuota
from ferryman_server.quota.service import QuotaService
from ferryman_server.quota.settings import QuotaSettings
from ferryman_server.registry.snapshot import ConfigSnapshot, PolicyRecord
from ferryman_server.registry.specs import QuotaLimits

LIMIT = 40
CLIENTS = 64
RECOVERY_GUARD_S = 60.0
"""Stops a test that would wait forever for the quota to recover; it does not time it."""
# Accounting tests share the CPU with the platform's in-process services; a generous
# backend timeout keeps them about arithmetic, not scheduling luck.
ACCOUNTING_TIMEOUT_S = 5.0


LOADED_BUDGET_S = 10.0


def policy_snapshot(tenant: str, **limits: object) -> ConfigSnapshot:
    record = PolicyRecord(tenant, "", QuotaLimits(**limits))  # type: ignore[arg-type]
    return ConfigSnapshot(revision=1, policies={tenant: [record]})


def quota_service(redis_url: str, snapshot: ConfigSnapshot, **settings: object) -> QuotaService:
    config = QuotaSettings(backend="redis", redis_url=redis_url, **settings)  # type: ignore[arg-type]
    client = aioredis.Redis.from_url(
        redis_url, socket_timeout=config.backend_timeout_s, socket_connect_timeout=config.backend_timeout_s
    )
    return QuotaService(
        config,
        RedisQuota(client, config.reservation_ttl_s, config.kept_answers_per_tenant_bytes),
        lambda: snapshot,
    )


def test_two_routers_admit_exactly_the_request_limit(e2e: E2E, redis_url: str) -> None:
    tenant = f"capped-{uuid.uuid4().hex[:6]}"
    key = e2e.writer.create_tenant(tenant).plaintext
    e2e.writer.set_quota(tenant, QuotaLimits(rpm=LIMIT))
    # Exactness is what this is about: a loaded CI machine's Redis latency must not turn a
    # decision into UNAVAILABLE (the default budgets are 0.25 s and 0.5 s).
    quota = QuotaSettings(backend="redis", redis_url=redis_url, backend_timeout_s=LOADED_BUDGET_S)
    routers = [e2e.start_router(quota, quota_timeout_s=LOADED_BUDGET_S)[0] for _ in range(2)]
    request = inference_pb2.PredictRequest(
        model="echo",
        inputs=[common_pb2.NamedTensor(name="input", tensor=encode(np.ones((1, echo.WIDTH), np.float32)))],
    )
    metadata = (("authorization", f"Bearer {key}"),)
    deadline = time.monotonic() + 5
    for router in routers:  # both routers know the new tenant before the race starts
        while True:
            try:
                inference_pb2_grpc.InferenceStub(grpc.insecure_channel(router)).ListModels(
                    inference_pb2.ListModelsRequest(), metadata=metadata, timeout=5
                )
                break
            except grpc.RpcError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
    stubs = [inference_pb2_grpc.InferenceStub(grpc.insecure_channel(r)) for r in routers]

    def client(i: int) -> list[grpc.StatusCode]:
        codes = []
        for _ in range(2):
            try:
                stubs[i % 2].Predict(request, metadata=metadata, timeout=30)
                codes.append(grpc.StatusCode.OK)
            except grpc.RpcError as error:
                codes.append(error.code())
        return codes

    with ThreadPoolExecutor(CLIENTS) as pool:
        codes = [c for result in pool.map(client, range(CLIENTS)) for c in result]
    assert codes.count(grpc.StatusCode.OK) == LIMIT
    assert codes.count(grpc.StatusCode.RESOURCE_EXHAUSTED) == 2 * CLIENTS - LIMIT


async def test_cost_limit_overshoots_by_at_most_one_reservation(redis_url: str) -> None:
    tenant = f"spender-{uuid.uuid4().hex[:6]}"
    limit, each = 1.0, 0.03
    snapshot = policy_snapshot(tenant, cost_per_day_usd=limit)
    services = [quota_service(redis_url, snapshot, backend_timeout_s=ACCOUNTING_TIMEOUT_S) for _ in range(2)]

    async def spend(i: int) -> bool:
        request_id = f"{tenant}/{i}"
        verdict = await services[i % 2].reserve(ReserveCall(request_id, tenant, "echo", Ask(0, each), "fp"))
        if verdict.decision == Decision.REJECT:
            return False
        await services[i % 2].commit(request_id, 0, each)
        return True

    admitted = sum(await asyncio.gather(*(spend(i) for i in range(CLIENTS))))
    rows, _ = await services[0].usage(tenant)
    spent = dict((name, current) for name, current, _, _ in rows)[f"{tenant}:cost_per_day"]
    assert spent == pytest.approx(admitted * each)
    assert spent <= limit + each
    assert admitted == int(limit // each)


async def test_retried_commit_and_release_never_double_count(redis_url: str) -> None:
    tenant = f"retry-{uuid.uuid4().hex[:6]}"
    service = quota_service(
        redis_url,
        policy_snapshot(tenant, rpm=100, tpm=1000, cost_per_day_usd=10.0),
        backend_timeout_s=ACCOUNTING_TIMEOUT_S,
    )
    first = await service.reserve(ReserveCall(f"{tenant}/a", tenant, "m", Ask(100, 0.5), "fp"))
    again = await service.reserve(ReserveCall(f"{tenant}/a", tenant, "m", Ask(100, 0.5), "fp"))
    assert first.decision == again.decision == Decision.ADMIT
    assert first.held and not again.held  # the retry is answered alike; only the first settles
    assert [await service.commit(f"{tenant}/a", 40, 0.2), await service.commit(f"{tenant}/a", 40, 0.2)] == [
        True,
        False,
    ]
    assert not await service.release(f"{tenant}/a")
    await service.reserve(ReserveCall(f"{tenant}/b", tenant, "m", Ask(100, 0.5), "fp"))
    assert [await service.release(f"{tenant}/b"), await service.release(f"{tenant}/b")] == [True, False]
    rows, _ = await service.usage(tenant)
    usage = {name.split(":")[-1]: current for name, current, _, _ in rows}
    assert usage["rpm"] == 1  # b was released: only a counts
    assert usage["cost_per_day"] == pytest.approx(0.2)


async def test_redis_outage_follows_fail_mode_and_recovers(tmp_path: Path) -> None:
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    proc = start_redis(port, tmp_path)
    assert wait_for_redis(port)
    tenant = "outage"
    snapshot = policy_snapshot(tenant, rpm=1000)
    closed = quota_service(url, snapshot, fail_mode="closed")
    opened = quota_service(url, snapshot, fail_mode="open")
    try:
        assert (
            await closed.reserve(ReserveCall("o/1", tenant, "m", Ask(0, 0), "fp"))
        ).decision == Decision.ADMIT
        proc.terminate()
        proc.wait(10)
        # Answered while Redis is still down (it comes back only below): refused when closed,
        # admitted when open, neither waiting for it.
        with pytest.raises(QuotaUnavailable):
            await closed.reserve(ReserveCall("o/2", tenant, "m", Ask(0, 0), "fp"))
        assert (
            await opened.reserve(ReserveCall("o/3", tenant, "m", Ask(0, 0), "fp"))
        ).decision == Decision.ADMIT
        assert not await closed.commit("o/1", 0, 0)  # settle fails soft; the reservation expires
        proc = start_redis(port, tmp_path)
        assert wait_for_redis(port)
        recovered_at = time.monotonic()
        while True:
            try:
                verdict = await closed.reserve(
                    ReserveCall(f"o/{uuid.uuid4().hex}", tenant, "m", Ask(0, 0), "fp")
                )
                break
            except QuotaUnavailable:
                assert time.monotonic() - recovered_at < RECOVERY_GUARD_S, "quota never recovered"
                await asyncio.sleep(0.1)
        assert verdict.decision == Decision.ADMIT
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.abuse
async def test_a_full_store_refuses_clearly_and_says_nothing_of_redis(tmp_path: Path) -> None:
    """Redis at its maxmemory (noeviction, as the chart runs it) refuses every write: a
    Reserve is refused with a message saying the store is full, not Redis's own text."""
    port = free_port()
    proc = start_redis(port, tmp_path, maxmemory="4mb")
    try:
        assert wait_for_redis(port)
        url = f"redis://127.0.0.1:{port}/0"
        filler = aioredis.Redis.from_url(url)
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            for i in range(100_000):  # until even a small write is refused: past maxmemory
                await filler.set(f"junk:{i}", b"x" * 64)
        await filler.aclose()
        service = quota_service(url, policy_snapshot("full", rpm=100_000))
        # Redis compares its memory with maxmemory before each script: a closed connection's
        # buffers may leave room for a few more reservations before the refusals.
        with pytest.raises(QuotaUnavailable) as refused:
            for i in range(1000):
                await service.reserve(ReserveCall(f"full/{i}", "full", "m", Ask(1, 0.0), "fp"))
        assert str(refused.value) == "the quota store is full: requests are refused until it has room"
    finally:
        proc.kill()
        proc.wait(10)
