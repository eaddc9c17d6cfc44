"""A tenant cannot fill the job stores with uploaded files: past its bytes a day, an upload
is refused and nothing is kept, on real Redis and on the registry database; another
tenant's allowance is its own."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from ferryman_server.jobs.port import JobQueue
from ferryman_server.jobs.sql_store import SqlJobStore
from ferryman_server.jobs.store import JobStore, LimitReached
from ferryman_server.registry.db import make_engine
from ferryman_server.registry.migrate import upgrade

FILES_REDIS_DB = 6
MOST_BYTES = 1000


def open_store(kind: str, redis_url: str, tmp_path: Path) -> JobQueue:
    if kind == "redis":
        return JobStore(redis_url.rsplit("/", 1)[0] + f"/{FILES_REDIS_DB}", timeout_s=5)
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    upgrade(make_engine(url))
    return SqlJobStore(url, timeout_s=5)


@pytest.mark.parametrize("kind", ["redis", "registry"])
def test_uploads_past_a_tenants_bytes_a_day_are_refused(kind: str, redis_url: str, tmp_path: Path) -> None:
    tenant, other = f"uploader-{time.time_ns()}", f"other-{time.time_ns()}"

    async def scenario() -> None:
        store = open_store(kind, redis_url, tmp_path)
        now = time.time()
        try:
            await store.put_file(tenant, "file-1", "a.jsonl", b"x" * 600, now, MOST_BYTES)
            with pytest.raises(LimitReached):
                await store.put_file(tenant, "file-2", "b.jsonl", b"x" * 600, now, MOST_BYTES)
            assert await store.get_file(tenant, "file-2") is None  # nothing kept
            await store.put_file(tenant, "file-3", "c.jsonl", b"x" * 400, now, MOST_BYTES)  # exactly at it
            await store.put_file(other, "file-1", "a.jsonl", b"x" * 1000, now, MOST_BYTES)
            kept = await store.get_file(tenant, "file-1")
            assert kept is not None and kept.content == b"x" * 600
        finally:
            await store.close()

    asyncio.run(scenario())
