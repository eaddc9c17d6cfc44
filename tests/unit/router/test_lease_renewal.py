"""The router renews its running reservations in chunks the Quota service accepts, and a
failed renewal never stops renewing (that would free every running request's slot)."""

from __future__ import annotations

import asyncio

from ferryman_server.kernel.quota import MAX_RENEW_IDS, Ask, Decision, ReserveCall, Verdict
from ferryman_server.router.metrics import RouterMetrics
from ferryman_server.router.reservations import Reservations
from ferryman_server.router.settings import RouterSettings

CALLS_IN_TWO_PERIODS = 6
FAR = 1e12


class FlakyQuota:
    """Holds every reservation; its first renewal fails."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.two_periods = asyncio.Event()

    def unlimited(self, tenant: str, model: str) -> bool:
        return False

    async def reserve(self, call: ReserveCall, budget_s: float) -> Verdict:
        return Verdict(Decision.ADMIT)

    async def renew(self, request_ids: list[str], budget_s: float) -> int:
        self.calls.append(request_ids)
        if len(self.calls) == CALLS_IN_TWO_PERIODS:
            self.two_periods.set()
        if len(self.calls) == 1:
            raise RuntimeError("quota service hiccup")
        return len(request_ids)

    async def commit(
        self, request_id: str, tokens: int, cost: float, budget_s: float, answer: bytes = b""
    ) -> bool:
        return True

    async def release(self, request_id: str, budget_s: float) -> bool:
        return True

    async def charge(
        self, charge_id: str, tenant: str, model: str, total_cost: float, budget_s: float
    ) -> tuple[float, bool]:
        return 0.0, False


async def test_renewals_are_chunked_and_survive_a_failure() -> None:
    quota = FlakyQuota()
    reservations = Reservations(RouterSettings(lease_renew_s=0.01), quota, RouterMetrics(1))
    held = {f"t/{i}" for i in range(2 * MAX_RENEW_IDS + 5)}
    for quota_id in held:
        await reservations.reserve(quota_id, "t", "m", Ask(0, 0.0), lambda: "fp", FAR, replayable=True)
    assert reservations.held == len(held)
    stop = asyncio.Event()
    renewer = asyncio.create_task(reservations.renew_leases(stop))
    # Two periods of three chunks, the very first one failing (a dead loop never gets there).
    await asyncio.wait_for(quota.two_periods.wait(), timeout=5)
    stop.set()
    await renewer
    assert all(len(chunk) <= MAX_RENEW_IDS for chunk in quota.calls)
    assert set().union(*quota.calls[3:6]) == held  # the period after the failure renewed all


async def test_a_settled_reservation_is_renewed_no_more() -> None:
    quota = FlakyQuota()
    reservations = Reservations(RouterSettings(), quota, RouterMetrics(1))
    for quota_id in ("t/a", "t/b", "t/c"):
        await reservations.reserve(quota_id, "t", "m", Ask(0, 0.0), lambda: "fp", FAR, replayable=True)
    reservations.commit_later("t/a", 1, 0.0)
    reservations.release_later("t/b")
    await reservations.close()
    assert reservations.held == 1
