"""Quota arithmetic with a fake clock on the memory backend (the pure policy code):
the parity scenarios, then what only the memory backend keeps (its reservation table)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from quota_scenarios import KEPT, SCENARIOS, TTL_S, Clock, Harness

from ferryman_server.quota.memory import MemoryQuota
from ferryman_server.quota.policy import Limits
from ferryman_server.quota.service import InvalidQuotaCall, check_call


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
async def test_memory_backend(scenario: Callable[[Harness], Awaitable[None]]) -> None:
    clock = Clock()
    await scenario(
        Harness(MemoryQuota(reservation_ttl_s=TTL_S, kept_per_tenant_bytes=KEPT, clock=clock), clock)
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
