"""The quota parity scenarios on real Redis: the Lua scripts decide as the Python policy does."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import redis.asyncio as aioredis
from quota_scenarios import KEPT, SCENARIOS, TTL_S, Clock, Harness

from ferryman_server.quota.redis_backend import RedisQuota

PARITY_DB = 15
"""A database of the session's private Redis that only these tests use (flushed per scenario)."""


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    url = redis_url.rsplit("/", 1)[0] + f"/{PARITY_DB}"
    redis = aioredis.Redis.from_url(url)
    await redis.flushdb()
    yield redis
    await redis.aclose()


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
async def test_redis_backend(client: aioredis.Redis, scenario: Callable[[Harness], Awaitable[None]]) -> None:
    clock = Clock()
    await scenario(
        Harness(RedisQuota(client, reservation_ttl_s=TTL_S, kept_per_tenant_bytes=KEPT, clock=clock), clock)
    )
