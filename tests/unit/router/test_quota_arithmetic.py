"""Quota arithmetic with a fake clock (the memory backend runs the pure policy code)."""

from __future__ import annotations

import pytest

from router.quota.memory import MemoryQuota
from router.quota.policy import Decision, Limits


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_rpm_admits_n_in_any_minute() -> None:
    clock = Clock()
    quota = MemoryQuota(reservation_ttl_s=300, clock=clock)
    limits = [Limits(scope="t", rpm=3)]
    decisions = [(await quota.reserve(f"r{i}", limits, 0, 0)).decision for i in range(4)]
    assert decisions == [Decision.ADMIT] * 3 + [Decision.REJECT]
    rejected = await quota.reserve("r9", limits, 0, 0)
    assert rejected.violations[0].limit == "rpm" and 59 < rejected.retry_after_s <= 60
    clock.now += 60.5
    assert (await quota.reserve("r10", limits, 0, 0)).decision == Decision.ADMIT


async def test_rpm_log_slides_and_a_refund_frees_its_place() -> None:
    clock = Clock()
    quota = MemoryQuota(reservation_ttl_s=300, clock=clock)
    limits = [Limits(scope="t", rpm=3)]
    for i in range(3):  # admitted at +0, +10, +20
        assert (await quota.reserve(f"s{i}", limits, 0, 0)).decision == Decision.ADMIT
        clock.now += 10
    rejected = await quota.reserve("late", limits, 0, 0)  # at +30: the oldest leaves at +60
    assert rejected.decision == Decision.REJECT and rejected.retry_after_s == pytest.approx(30)
    assert await quota.release("s1")  # refunded: its place is free at once
    assert (await quota.reserve("refilled", limits, 0, 0)).decision == Decision.ADMIT
    clock.now += 30.5  # +60.5: s0 has left the window, s2 and refilled remain
    usage = {name: current for name, current, _, _ in await quota.usage(limits)}
    assert usage["t:rpm"] == 2
    assert (await quota.reserve("next", limits, 0, 0)).decision == Decision.ADMIT
    assert (await quota.reserve("over", limits, 0, 0)).decision == Decision.REJECT


async def test_burst_limits_requests_at_once() -> None:
    clock = Clock()
    quota = MemoryQuota(300, clock)
    limits = [Limits(scope="t", rpm=60, burst=2)]
    assert [(await quota.reserve(f"b{i}", limits, 0, 0)).decision for i in range(3)] == [
        Decision.ADMIT,
        Decision.ADMIT,
        Decision.REJECT,
    ]
    clock.now += 1.0  # 60 rpm refills one per second
    assert (await quota.reserve("b3", limits, 0, 0)).decision == Decision.ADMIT


async def test_tokens_settle_on_commit_and_refund_on_release() -> None:
    clock = Clock()
    quota = MemoryQuota(300, clock)
    limits = [Limits(scope="t", tpm=100)]
    assert (await quota.reserve("a", limits, 80, 0)).decision == Decision.ADMIT
    assert (await quota.reserve("b", limits, 30, 0)).decision == Decision.REJECT  # 80 + 30 > 100
    assert await quota.commit("a", 20, 0)  # actual 20: 60 tokens come back
    assert (await quota.reserve("c", limits, 70, 0)).decision == Decision.ADMIT
    assert await quota.release("c")
    assert not await quota.release("c") and not await quota.commit("a", 20, 0)  # idempotent
    assert (await quota.reserve("d", limits, 80, 0)).decision == Decision.ADMIT


async def test_cost_per_day_and_soft_mode_degrades() -> None:
    clock = Clock()
    quota = MemoryQuota(300, clock)
    soft = [Limits(scope="t", cost_per_day_usd=1.0, soft=True)]
    assert (await quota.reserve("a", soft, 0, 0.8)).decision == Decision.ADMIT
    degraded = await quota.reserve("b", soft, 0, 0.5)
    assert degraded.decision == Decision.DEGRADE and degraded.violations[0].limit == "cost_per_day"
    hard = [Limits(scope="u", cost_per_day_usd=1.0)]
    await quota.reserve("c", hard, 0, 0.8)
    assert (await quota.reserve("d", hard, 0, 0.5)).decision == Decision.REJECT
    clock.now += 86400
    assert (await quota.reserve("e", hard, 0, 0.5)).decision == Decision.ADMIT


async def test_concurrency_and_expired_reservations_are_counted() -> None:
    clock = Clock()
    quota = MemoryQuota(reservation_ttl_s=10, clock=clock)
    limits = [Limits(scope="t", max_concurrency=1)]
    assert (await quota.reserve("a", limits, 0, 0)).decision == Decision.ADMIT
    assert (await quota.reserve("b", limits, 0, 0)).decision == Decision.REJECT
    clock.now += 11  # a was never settled: it expires and frees its slot
    assert (await quota.reserve("c", limits, 0, 0)).decision == Decision.ADMIT
    assert await quota.expired_count() == 1
    assert not await quota.commit("a", 0, 0)


async def test_settled_reservations_are_kept_for_retries_then_forgotten() -> None:
    clock = Clock()
    quota = MemoryQuota(reservation_ttl_s=10, clock=clock)
    limits = [Limits(scope="t", rpm=1000)]
    for i in range(100):
        await quota.reserve(f"r{i}", limits, 0, 0)
        await quota.commit(f"r{i}", 0, 0)
    clock.now += 15  # past expiry, within expiry + TTL: a retried reserve is still idempotent
    retried = await quota.reserve("r0", limits, 0, 0)
    assert retried.decision == Decision.ADMIT and len(quota._reservations) == 100
    clock.now += 10
    await quota.reserve("new", limits, 0, 0)
    assert set(quota._reservations) == {"new"}
    assert await quota.expired_count() == 0  # settled ones are forgotten, not counted as expired


async def test_all_or_nothing_across_policies() -> None:
    quota = MemoryQuota(300, Clock())
    tenant = Limits(scope="t", rpm=10)
    model = Limits(scope="t/m", rpm=1)
    assert (await quota.reserve("a", [tenant, model], 0, 0)).decision == Decision.ADMIT
    assert (await quota.reserve("b", [tenant, model], 0, 0)).decision == Decision.REJECT
    usage = {name: current for name, current, _, _ in await quota.usage([tenant])}
    assert usage["t:rpm"] == pytest.approx(1)  # the rejected request charged nothing
