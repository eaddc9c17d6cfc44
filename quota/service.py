"""The Quota service's behaviour: policies from the registry, counters in a backend,
a fail mode when the backend is down. Hosted in the router or on its own."""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol

import redis.asyncio as aioredis
from redis.exceptions import OutOfMemoryError, RedisError

from ferryman_server.kernel.logs import Throttled
from ferryman_server.kernel.quota import (
    MAX_ANSWER_BYTES,
    MAX_COST_USD,
    MAX_NAME_CHARS,
    MAX_RENEW_IDS,
    MAX_REQUEST_ID_CHARS,
    MAX_TOKENS,
    Decision,
    QuotaUnavailable,
    ReserveCall,
    Verdict,
)
from ferryman_server.quota.memory import MemoryQuota
from ferryman_server.quota.policy import Limits
from ferryman_server.quota.redis_backend import RedisQuota
from ferryman_server.quota.settings import QuotaSettings
from ferryman_server.registry.snapshot import ConfigSnapshot, PolicyRecord

log = logging.getLogger("ferryman.quota")


class InvalidQuotaCall(ValueError):
    """A call no honest caller makes: negative, unbounded or missing values."""


def check_call(request_id: str, tokens: int = 0, cost: float = 0.0) -> None:
    """Refuse ids and charges out of bounds: no negative or non-finite charge is ever applied."""
    if not request_id or len(request_id) > MAX_REQUEST_ID_CHARS:
        raise InvalidQuotaCall(f"request_id must have 1 to {MAX_REQUEST_ID_CHARS} characters")
    if not 0 <= tokens <= MAX_TOKENS:
        raise InvalidQuotaCall(f"tokens must be between 0 and {MAX_TOKENS}")
    if not (math.isfinite(cost) and 0 <= cost <= MAX_COST_USD):
        raise InvalidQuotaCall(f"cost must be between 0 and {MAX_COST_USD:g} USD")


class QuotaBackend(Protocol):
    async def reserve(
        self, call: ReserveCall, policies: Sequence[Limits], lease_s: float, budget_s: float
    ) -> Verdict: ...
    async def renew(self, request_ids: Sequence[str], lease_s: float) -> int: ...
    async def commit(self, request_id: str, tokens: int, cost: float, answer: bytes = b"") -> bool: ...
    async def release(self, request_id: str) -> bool: ...
    async def usage(self, policies: Sequence[Limits]) -> list[tuple[str, float, float, str]]: ...
    async def expired_count(self) -> int: ...
    async def warm(self) -> None:
        """Make ready what a first call would otherwise pay for (scripts, a connection)."""
        ...

    async def charge(
        self, charge_id: str, policies: Sequence[Limits], total_cost: float
    ) -> tuple[float, bool]: ...


def unavailable(exc: Exception) -> QuotaUnavailable:
    """What a tenant is told when the backend fails: whether it is full or out of reach, and
    nothing of it (its address, its error text) beyond that; the log line has the rest."""
    if isinstance(exc, OutOfMemoryError):
        return QuotaUnavailable("the quota store is full: requests are refused until it has room")
    return QuotaUnavailable("the quota store cannot be reached")


def make_backend(settings: QuotaSettings) -> QuotaBackend:
    if settings.backend == "redis":
        # A bounded pool whose calls wait for a free connection (within the backend timeout):
        # redis-py's default pool holds 100 and fails the 101st call at once ("Too many
        # connections"), and every request with an id of its own reserves here.
        pool = aioredis.BlockingConnectionPool.from_url(
            settings.redis_url,
            max_connections=settings.redis_max_connections,
            timeout=settings.backend_timeout_s,
            socket_timeout=settings.backend_timeout_s,
            socket_connect_timeout=settings.backend_timeout_s,
        )
        client = aioredis.Redis(connection_pool=pool)
        return RedisQuota(client, settings.reservation_ttl_s, settings.kept_answers_per_tenant_bytes)
    return MemoryQuota(settings.reservation_ttl_s, settings.kept_answers_per_tenant_bytes)


def to_limits(policy: PolicyRecord) -> Limits:
    """A registry policy as the arithmetic counts it: its limits under its counters' scope."""
    limits = policy.limits
    return Limits(
        scope=f"{policy.tenant}/{policy.model}" if policy.model else policy.tenant,
        rpm=limits.rpm,
        burst=limits.burst,
        tpm=limits.tpm,
        cost_per_day_usd=limits.cost_per_day_usd,
        max_concurrency=limits.max_concurrency,
        soft=limits.mode == "soft",
    )


class QuotaService:
    """Reserve / Commit / Release / usage, idempotent on request id."""

    def __init__(
        self, settings: QuotaSettings, backend: QuotaBackend, snapshot: Callable[[], ConfigSnapshot]
    ) -> None:
        self._settings = settings
        self._backend = backend
        self._snapshot = snapshot
        # An outage fails every request alike: one line per period, not one per request.
        self._log = Throttled(log, settings.repeated_log_period_s)

    def limits(self, tenant: str, model: str) -> list[Limits]:
        policies = self._snapshot().policies.get(tenant, [])
        return [to_limits(p) for p in policies if p.model in ("", model)]

    async def reserve(self, call: ReserveCall) -> Verdict:
        """Check and charge every limit of (tenant, model), idempotent on request id:
        a repeat with the same fingerprint is answered as the first (with the first call's
        kept answer, or ``running``), another is a CONFLICT. A replayable call is bound even
        without limits. With ``min_tokens``, hard token and cost limits may grant fewer
        tokens (``Ask``)."""
        tenant, model, ask = call.tenant, call.model, call.ask
        check_call(call.request_id, ask.tokens, ask.cost)
        check_call(call.request_id, ask.min_tokens, ask.cost_per_token)
        if not tenant or len(tenant) > MAX_NAME_CHARS or len(model) > MAX_NAME_CHARS:
            raise InvalidQuotaCall(f"tenant and model names have at most {MAX_NAME_CHARS} characters")
        limits = self.limits(tenant, model)
        if not limits and not call.replayable:
            return Verdict(Decision.ADMIT, held=False)
        budget = self._settings.backend_timeout_s
        try:
            # asyncio.timeout, not wait_for: no task per request on the hot path.
            async with asyncio.timeout(budget):
                return await self._backend.reserve(call, limits, self._settings.lease_s, budget)
        except (RedisError, OSError, TimeoutError) as exc:
            if self._settings.fail_mode == "open":
                self._log.warning("fail-open", "quota backend down, admitting (fail open): %r", exc)
                return Verdict(Decision.ADMIT, held=False)
            self._log.warning("fail-closed", "quota backend down, refusing (fail closed): %r", exc)
            raise unavailable(exc) from exc

    async def renew(self, request_ids: Sequence[str]) -> int:
        """Extend the leases of reservations still running; those already settled are skipped."""
        if len(request_ids) > MAX_RENEW_IDS:
            raise InvalidQuotaCall(f"at most {MAX_RENEW_IDS} request ids per renewal")
        for request_id in request_ids:
            check_call(request_id)
        try:
            return await asyncio.wait_for(
                self._backend.renew(request_ids, self._settings.lease_s), self._settings.backend_timeout_s
            )
        except (RedisError, OSError, TimeoutError) as exc:
            self._log.warning("renew", "quota lease renewal failed (leases run on): %s", exc)
            return 0

    async def commit(self, request_id: str, tokens: int, cost: float, answer: bytes = b"") -> bool:
        """Settle with what the request used; ``answer`` is kept for its repeats when it
        fits ``kept_answer_bytes`` (else they are refused)."""
        check_call(request_id, tokens, cost)
        if len(answer) > MAX_ANSWER_BYTES:
            raise InvalidQuotaCall(f"an answer has at most {MAX_ANSWER_BYTES} bytes")
        kept = answer if len(answer) <= self._settings.kept_answer_bytes else b""
        return await self._settle(lambda: self._backend.commit(request_id, tokens, cost, kept))

    async def release(self, request_id: str) -> bool:
        check_call(request_id)
        return await self._settle(lambda: self._backend.release(request_id))

    async def _settle(self, call: Callable[[], Coroutine[Any, Any, bool]]) -> bool:
        """A settle is off every answer's path and idempotent (the scripts settle a
        reservation once), so a slow backend is tried again: one left unsettled expires
        charged at its upper bound (a released one in full)."""
        for attempt in range(self._settings.settle_attempts):
            try:
                async with asyncio.timeout(self._settings.backend_timeout_s):
                    return bool(await call())
            except (RedisError, OSError, TimeoutError) as exc:
                if attempt + 1 == self._settings.settle_attempts:
                    self._log.warning("settle", "quota settle failed, the reservation will expire: %s", exc)
        return False

    async def charge(self, charge_id: str, tenant: str, model: str, total_cost: float) -> tuple[float, bool]:
        """Bring an account's cost so far (a job's) into the tenant's daily spend: only what
        it was not charged before. Returns (dollars added, a hard daily cost limit reached).
        Raises QuotaUnavailable when the backend cannot be reached (the caller tries again:
        a charge is idempotent), whatever the fail mode: spend is never dropped."""
        check_call(charge_id, 0, total_cost)
        if not tenant or len(tenant) > MAX_NAME_CHARS or len(model) > MAX_NAME_CHARS:
            raise InvalidQuotaCall(f"tenant and model names have at most {MAX_NAME_CHARS} characters")
        try:
            async with asyncio.timeout(self._settings.backend_timeout_s):
                return await self._backend.charge(charge_id, self.limits(tenant, model), total_cost)
        except (RedisError, OSError, TimeoutError) as exc:
            self._log.warning("charge", "quota charge failed (the caller tries again): %r", exc)
            raise unavailable(exc) from exc

    async def warm(self) -> None:
        """Ready the backend before the first burst; a backend down now is not fatal (each
        call then fails by the fail mode, as it would later)."""
        try:
            async with asyncio.timeout(self._settings.backend_timeout_s * 4):
                await self._backend.warm()
        except (RedisError, OSError, TimeoutError) as exc:
            log.warning("quota backend not ready at start: %r", exc)

    async def usage(self, tenant: str) -> tuple[list[tuple[str, float, float, str]], int]:
        limits = [to_limits(p) for p in self._snapshot().policies.get(tenant, [])]
        return await self._backend.usage(limits), await self._backend.expired_count()
