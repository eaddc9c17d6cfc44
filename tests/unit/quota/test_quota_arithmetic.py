"""Quota arithmetic with a fake clock on the memory backend (the pure policy code):
the parity scenarios, then what only the memory backend keeps (its reservation table)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from quota_scenarios import SCENARIOS, Clock, Harness

from ferryman_server.quota.memory import MemoryQuota
from ferryman_server.quota.policy import Limits
from ferryman_server.quota.service import InvalidQuotaCall, check_call

KEPT = 1024 * 1024


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
async def test_memory_backend(scenario: Callable[[Harness], Awaitable[None]]) -> None:
    clock = Clock()
    await scenario(
        Harness(MemoryQuota(reservation_ttl_s=300, kept_per_tenant_bytes=KEPT, clock=clock), clock)
    )


async def test_settled_reservations_are_kept_for_retries_then_forgotten() -> None:
    clock = Clock()
    quota = MemoryQuota(reservation_ttl_s=10, kept_per_tenant_bytes=KEPT, clock=clock)
    q = Harness(quota, clock)
    limits = [Limits(scope="t", rpm=1000)]
    for i in range(100):
        await q.reserve(f"r{i}", limits, lease_s=10)
        await quota.commit(f"r{i}", 0, 0)
    clock.now += 15  # past the lease, within lease + TTL: a retried reserve is still idempotent
    retried = await q.reserve("r0", limits, lease_s=10)
    assert not retried.held and len(quota._reservations) == 100
    clock.now += 10
    await q.reserve("new", limits, lease_s=10)
    assert set(quota._reservations) == {"new"}
    assert await quota.expired_count() == 0  # settled ones are forgotten, not counted as expired


@pytest.mark.parametrize(
    ("request_id", "tokens", "cost"),
    [
        ("", 0, 0.0),
        ("x" * 257, 0, 0.0),
        ("a", -1, 0.0),
        ("a", 0, -1.0),
        ("a", 0, float("nan")),
        ("a", 0, 1e9),
    ],
)
def test_out_of_bounds_calls_are_refused(request_id: str, tokens: int, cost: float) -> None:
    with pytest.raises(InvalidQuotaCall):
        check_call(request_id, tokens, cost)


async def test_a_tenants_kept_answers_are_bounded_and_freed_when_forgotten() -> None:
    """Past a tenant's budget new answers are not kept (their repeats are refused by the
    router); other tenants keep theirs; a forgotten id frees its bytes."""
    clock = Clock()
    quota = MemoryQuota(reservation_ttl_s=10, kept_per_tenant_bytes=2500, clock=clock)
    q = Harness(quota, clock)
    for rid in ("a/1", "a/2", "a/3", "b/1"):
        assert (await q.reserve(rid, [], lease_s=10, replayable=True)).held
        assert await quota.commit(rid, 0, 0, b"x" * 1000)
    answers = {rid: (await q.reserve(rid, [], lease_s=10)).answer for rid in ("a/1", "a/2", "a/3", "b/1")}
    assert [len(answers[r]) for r in ("a/1", "a/2", "a/3", "b/1")] == [1000, 1000, 0, 1000]
    clock.now += 25  # past lease + TTL: forgotten, their bytes free again
    assert (await q.reserve("a/4", [], lease_s=10, replayable=True)).held
    assert await quota.commit("a/4", 0, 0, b"y" * 2000)
    assert (await q.reserve("a/4", [], lease_s=10)).answer == b"y" * 2000
