"""What the router and the batchers need of a job store, and which store a platform uses:
Redis when ``FERRYMAN_JOBS_REDIS_URL`` names one (any number of routers and batchers), else
the registry database when ``FERRYMAN_JOBS_IN_REGISTRY`` is on (``ferryman up``: one
router, no Redis needed). Both raise OSError (or a Redis error) when unreachable."""

from __future__ import annotations

from typing import Protocol

from ferryman.jobs.store import Claimed, JobRecord, JobStore, State
from ferryman.kernel.config import CommonSettings


class JobQueue(Protocol):
    async def close(self) -> None: ...
    async def ensure_group(self) -> None: ...
    async def create(
        self,
        record: JobRecord,
        items: list[bytes],
        most_jobs: int | None = None,
        most_items: int | None = None,
    ) -> JobRecord: ...
    async def exists(self, tenant: str, job_id: str) -> bool: ...
    async def get(self, tenant: str, job_id: str) -> JobRecord | None: ...
    async def jobs(self, tenant: str, limit: int, before: str = "") -> list[JobRecord]: ...
    async def finish(self, tenant: str, job_id: str, state: State) -> JobRecord | None: ...
    async def results(self, tenant: str, job_id: str, offset: int, limit: int) -> dict[int, bytes]: ...
    async def claim(self, consumer: str, count: int, block_ms: int, idle_ms: int) -> list[Claimed]: ...
    async def record(self, claimed: Claimed, result: bytes, ok: bool, cost: float) -> bool: ...
    async def ack(self, claimed: Claimed) -> None: ...
    async def backlog(self) -> tuple[int, float]: ...
    async def uncharged(self, count: int) -> list[tuple[str, JobRecord | None]]: ...
    async def charged(self, key: str) -> None: ...


def jobs_enabled(common: CommonSettings) -> bool:
    return bool(common.jobs_redis_url) or common.jobs_in_registry


def open_job_queue(common: CommonSettings, timeout_s: float) -> JobQueue | None:
    """The platform's job store (None: no durable jobs)."""
    if common.jobs_redis_url:
        return JobStore(common.jobs_redis_url, timeout_s)
    if common.jobs_in_registry:
        from ferryman.jobs.sql_store import SqlJobStore  # the registry's tables, only when used

        return SqlJobStore(common.resolved_database_url(), timeout_s)
    return None
