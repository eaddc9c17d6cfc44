"""The router renews its running reservations in chunks the Quota service accepts, and a
failed renewal never stops renewing (that would free every running request's slot)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from ferryman_kernel.quota import MAX_RENEW_IDS
from router.service import RouterService
from router.settings import RouterSettings

CALLS_IN_TWO_PERIODS = 6


class FlakyQuota:
    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.two_periods = asyncio.Event()

    async def renew(self, request_ids: list[str], budget_s: float) -> int:
        self.calls.append(request_ids)
        if len(self.calls) == CALLS_IN_TWO_PERIODS:
            self.two_periods.set()
        if len(self.calls) == 1:
            raise RuntimeError("quota service hiccup")
        return len(request_ids)


async def test_renewals_are_chunked_and_survive_a_failure() -> None:
    quota = FlakyQuota()
    service = RouterService(
        RouterSettings(lease_renew_s=0.01),
        cache=cast(Any, None),
        quota=cast(Any, quota),
        batchers=cast(Any, None),
        metrics=cast(Any, None),
    )
    held = {f"t/{i}" for i in range(2 * MAX_RENEW_IDS + 5)}
    service._held.update(held)
    stop = asyncio.Event()
    renewer = asyncio.create_task(service.renew_leases(stop))
    # Two periods of three chunks, the very first one failing (a dead loop never gets there).
    await asyncio.wait_for(quota.two_periods.wait(), timeout=5)
    stop.set()
    await renewer
    assert all(len(chunk) <= MAX_RENEW_IDS for chunk in quota.calls)
    assert set().union(*quota.calls[3:6]) == held  # the period after the failure renewed all
