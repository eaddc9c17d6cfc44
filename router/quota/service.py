"""The Quota service's behaviour: policies from the registry, counters in a backend,
a fail mode when the backend is down. Hosted in the router or on its own."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from registry.snapshot import ConfigSnapshot, PolicyRecord
from router.quota.memory import MemoryQuota
from router.quota.policy import Decision, Limits, Verdict
from router.quota.redis_backend import RedisQuota
from router.quota.settings import QuotaSettings

log = logging.getLogger("ferryman.quota")


class QuotaUnavailable(Exception):
    """The backend could not be reached and the fail mode is closed."""


class QuotaBackend(Protocol):
    async def reserve(
        self, request_id: str, policies: Sequence[Limits], tokens: int, cost: float
    ) -> Verdict: ...
    async def commit(self, request_id: str, tokens: int, cost: float) -> bool: ...
    async def release(self, request_id: str) -> bool: ...
    async def usage(self, policies: Sequence[Limits]) -> list[tuple[str, float, float, str]]: ...
    async def expired_count(self) -> int: ...


def make_backend(settings: QuotaSettings) -> QuotaBackend:
    if settings.backend == "redis":
        if not settings.redis_url:
            raise ValueError("FERRYMAN_QUOTA_REDIS_URL is required with the redis backend")
        client = aioredis.Redis.from_url(
            settings.redis_url,
            socket_timeout=settings.backend_timeout_s,
            socket_connect_timeout=settings.backend_timeout_s,
        )
        return RedisQuota(client, settings.reservation_ttl_s)
    return MemoryQuota(settings.reservation_ttl_s)


def to_limits(policy: PolicyRecord) -> Limits:
    return Limits(
        scope=f"{policy.tenant}/{policy.model}" if policy.model else policy.tenant,
        rpm=policy.rpm,
        burst=policy.burst,
        tpm=policy.tpm,
        cost_per_day_usd=policy.cost_per_day_usd,
        max_concurrency=policy.max_concurrency,
        soft=policy.mode == "soft",
    )


class QuotaService:
    """Reserve / Commit / Release / usage, idempotent on request id."""

    def __init__(
        self, settings: QuotaSettings, backend: QuotaBackend, snapshot: Callable[[], ConfigSnapshot]
    ) -> None:
        self._settings = settings
        self._backend = backend
        self._snapshot = snapshot

    def limits(self, tenant: str, model: str) -> list[Limits]:
        policies = self._snapshot().policies.get(tenant, [])
        return [to_limits(p) for p in policies if p.model in ("", model)]

    async def reserve(self, request_id: str, tenant: str, model: str, tokens: int, cost: float) -> Verdict:
        limits = self.limits(tenant, model)
        if not limits:
            return Verdict(Decision.ADMIT, held=False)
        try:
            return await asyncio.wait_for(
                self._backend.reserve(request_id, limits, tokens, cost), self._settings.backend_timeout_s
            )
        except (RedisError, OSError, TimeoutError) as exc:
            if self._settings.fail_mode == "open":
                log.warning("quota backend down, admitting (fail open): %s", exc)
                return Verdict(Decision.ADMIT, held=False)
            raise QuotaUnavailable(f"quota backend unavailable: {exc}") from exc

    async def commit(self, request_id: str, tokens: int, cost: float) -> bool:
        return await self._settle(self._backend.commit(request_id, tokens, cost))

    async def release(self, request_id: str) -> bool:
        return await self._settle(self._backend.release(request_id))

    async def _settle(self, call: Coroutine[Any, Any, bool]) -> bool:
        try:
            return bool(await asyncio.wait_for(call, self._settings.backend_timeout_s))
        except (RedisError, OSError, TimeoutError) as exc:
            # The reservation expires on its own; it is counted then.
            log.warning("quota settle failed, the reservation will expire: %s", exc)
            return False

    async def usage(self, tenant: str) -> tuple[list[tuple[str, float, float, str]], int]:
        limits = [to_limits(p) for p in self._snapshot().policies.get(tenant, [])]
        return await self._backend.usage(limits), await self._backend.expired_count()
