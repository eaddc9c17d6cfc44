"""A Commit or Release against a slow backend is tried again (settling is idempotent and off
every answer's path): one that gave up left its reservation to expire charged at its bound."""

from __future__ import annotations

from collections.abc import Sequence

from ferryman_server.kernel.quota import Ask, ReserveCall
from ferryman_server.quota.memory import MemoryQuota
from ferryman_server.quota.policy import Limits
from ferryman_server.quota.service import QuotaService
from ferryman_server.quota.settings import QuotaSettings
from ferryman_server.registry.snapshot import ConfigSnapshot

LIMITS = [Limits(scope="t", tpm=100)]
NOW = 1_000_000.0
"""A fixed clock: the token bucket does not refill while a loaded machine runs the test."""


def empty_snapshot() -> ConfigSnapshot:
    return ConfigSnapshot(revision=0)


class Slow(MemoryQuota):
    """Memory counters whose settles time out ``stalls`` times before they go through."""

    def __init__(self, stalls: int) -> None:
        super().__init__(reservation_ttl_s=300, kept_per_tenant_bytes=0, clock=lambda: NOW)
        self.stalls = stalls
        self.settles = 0

    async def commit(self, request_id: str, tokens: int, cost: float, answer: bytes = b"") -> bool:
        self.settles += 1
        if self.stalls:
            self.stalls -= 1
            raise TimeoutError("backend too slow")
        return await super().commit(request_id, tokens, cost, answer)

    async def usage(self, policies: Sequence[Limits]) -> list[tuple[str, float, float, str]]:
        return await super().usage(policies)


async def test_a_slow_settle_is_tried_again_and_lands_once() -> None:
    backend = Slow(stalls=2)
    service = QuotaService(QuotaSettings(settle_attempts=3), backend, empty_snapshot)
    assert (await backend.reserve(ReserveCall("r", "t", "", Ask(80, 0.0), "fp"), LIMITS, 10.0, 1.0)).held
    assert await service.commit("r", 20, 0.0)
    assert backend.settles == 3
    used = {name: current for name, current, _, _ in await backend.usage(LIMITS)}["t:tpm"]
    assert used == 20, "the actual 20, not the reserved 80"


async def test_a_settle_that_never_lands_gives_up_after_its_attempts() -> None:
    backend = Slow(stalls=5)
    service = QuotaService(QuotaSettings(settle_attempts=2), backend, empty_snapshot)
    await backend.reserve(ReserveCall("r", "t", "", Ask(80, 0.0), "fp"), LIMITS, 10.0, 1.0)
    assert not await service.commit("r", 20, 0.0)
    assert backend.settles == 2
