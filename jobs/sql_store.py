"""Jobs in the registry database, for a platform without Redis (``ferryman up`` alone): the
same calls and guarantees as ``ferryman_server.jobs.store.JobStore``, on two tables
(``ferryman_server.registry.tables.JobRow``, ``JobItemRow``).

An item is taken by marking it with the worker and the time, in one statement that only
takes items nobody holds, or that a worker has held past ``idle_ms`` (it died): the
database's write lock makes two workers' takes exclusive, as a consumer group does. A
result is recorded only over an empty one (``result IS NULL``) in the transaction that
counts it, so a second delivery records nothing. Every call runs in a worker thread (the
event loop never waits on the database); the limits on new jobs (unfinished jobs, items a
day) are checked and written in one transaction, serialized per process: the embedded
platform has one router. Several routers share jobs through Redis.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import Engine, func, or_, update
from sqlalchemy.exc import DBAPIError
from sqlmodel import Session, col, select

from ferryman_server.jobs.store import (
    DAY_S,
    RETENTION_S,
    Claimed,
    JobRecord,
    LimitReached,
    State,
    StoredFile,
    from_stored,
    stored,
)
from ferryman_server.registry.db import make_engine
from ferryman_server.registry.tables import JobFileRow, JobItemRow, JobRow

T = TypeVar("T")
UNFINISHED = (int(State.QUEUED), int(State.RUNNING))
POLL_S = 0.2
"""How often a worker waiting for items looks again."""


class StoreUnavailable(OSError):
    """The database could not be reached (callers treat it as they treat Redis down)."""


def row_key(tenant: str, job_id: str) -> str:
    return hashlib.sha256(f"{tenant}\0{job_id}".encode()).hexdigest()


def _record(row: JobRow) -> JobRecord:
    return from_stored(row.model_dump())


class SqlJobStore:
    """``JobStore``'s calls on the registry database at ``url``."""

    def __init__(self, url: str, timeout_s: float) -> None:
        self._engine: Engine = make_engine(url)
        self._timeout_s = timeout_s
        self._creating = asyncio.Lock()

    async def _run(self, work: Callable[[Session], T]) -> T:
        def call() -> T:
            with Session(self._engine, expire_on_commit=False) as session:
                out = work(session)
                session.commit()
                return out

        try:
            async with asyncio.timeout(self._timeout_s * 4):
                return await asyncio.to_thread(call)
        except DBAPIError as exc:
            raise StoreUnavailable(f"job database: {exc.orig}") from exc

    async def close(self) -> None:
        self._engine.dispose()

    async def ensure_group(self) -> None:
        """Nothing to set up: the tables are the registry's (its migrations)."""

    async def create(
        self,
        record: JobRecord,
        items: list[bytes],
        most_jobs: int | None = None,
        most_items: int | None = None,
    ) -> JobRecord:
        key = row_key(record.tenant, record.job_id)

        def work(s: Session) -> JobRecord:
            found = s.get(JobRow, key)
            if found is not None:
                return _record(found)
            mine = col(JobRow.tenant) == record.tenant
            if most_jobs:
                unfinished = s.exec(select(func.count()).where(mine, col(JobRow.state).in_(UNFINISHED))).one()
                if unfinished >= most_jobs:
                    raise LimitReached(f"{most_jobs} unfinished jobs already (jobs_in_flight)")
            if most_items:
                day_start = int(record.created // DAY_S) * DAY_S
                today = s.exec(
                    select(func.sum(JobRow.total)).where(mine, col(JobRow.created) >= day_start)
                ).one()
                if (today or 0) + len(items) > most_items:
                    raise LimitReached(
                        f"{len(items)} more items would pass {most_items} today (job_items_per_day)"
                    )
            s.add(JobRow(key=key, **(stored(record) | {"state": int(State.QUEUED)})))
            s.add_all(JobItemRow(job_key=key, idx=i, payload=item) for i, item in enumerate(items))
            s.flush()
            return record

        async with self._creating:  # the limits' check and the insert, one at a time
            return await self._run(work)

    async def exists(self, tenant: str, job_id: str) -> bool:
        return await self.get(tenant, job_id) is not None

    async def get(self, tenant: str, job_id: str) -> JobRecord | None:
        def work(s: Session) -> JobRecord | None:
            row = s.get(JobRow, row_key(tenant, job_id))
            return _record(row) if row is not None else None

        return await self._run(work)

    async def jobs(self, tenant: str, limit: int, before: str = "") -> list[JobRecord]:
        def work(s: Session) -> list[JobRecord]:
            query = select(JobRow).where(col(JobRow.tenant) == tenant)
            if before:
                after = s.get(JobRow, row_key(tenant, before))
                if after is not None:
                    query = query.where(col(JobRow.created) < after.created)
            rows = s.exec(query.order_by(col(JobRow.created).desc()).limit(limit)).all()
            return [_record(r) for r in rows]

        return await self._run(work)

    async def finish(self, tenant: str, job_id: str, state: State) -> JobRecord | None:
        key = row_key(tenant, job_id)

        def work(s: Session) -> JobRecord | None:
            s.execute(
                update(JobRow)
                .where(col(JobRow.key) == key, col(JobRow.state).in_(UNFINISHED))
                .values(state=int(state), finished=time.time())
            )
            row = s.get(JobRow, key)
            return _record(row) if row is not None else None

        return await self._run(work)

    async def results(self, tenant: str, job_id: str, offset: int, limit: int) -> dict[int, bytes]:
        def work(s: Session) -> dict[int, bytes]:
            rows = s.exec(
                select(JobItemRow.idx, JobItemRow.result).where(
                    col(JobItemRow.job_key) == row_key(tenant, job_id),
                    col(JobItemRow.idx) >= offset,
                    col(JobItemRow.idx) < offset + limit,
                    col(JobItemRow.result).is_not(None),
                )
            ).all()
            return {idx: bytes(result) for idx, result in rows if result is not None}

        return await self._run(work)

    async def claim(self, consumer: str, count: int, block_ms: int, idle_ms: int) -> list[Claimed]:
        """Items nobody holds, or held past ``idle_ms``, oldest first; waits up to
        ``block_ms`` for some."""
        give_up = time.monotonic() + block_ms / 1000
        while True:
            taken = await self._run(lambda s: self._take(s, consumer, count, idle_ms))
            if taken or time.monotonic() >= give_up:
                return taken
            await asyncio.sleep(POLL_S)

    @staticmethod
    def _take(s: Session, consumer: str, count: int, idle_ms: int) -> list[Claimed]:
        now = time.time()
        free = or_(col(JobItemRow.claimed_at).is_(None), col(JobItemRow.claimed_at) < now - idle_ms / 1000)
        seqs = s.exec(
            select(JobItemRow.seq)
            .where(col(JobItemRow.done).is_(False), free)
            .order_by(col(JobItemRow.seq))
            .limit(count)
        ).all()
        if not seqs:
            return []
        s.execute(
            update(JobItemRow)
            .where(col(JobItemRow.seq).in_(seqs), col(JobItemRow.done).is_(False), free)
            .values(claimed_by=consumer, claimed_at=now)
        )
        rows = s.exec(
            select(JobItemRow, JobRow)
            .join(JobRow, col(JobRow.key) == col(JobItemRow.job_key))
            .where(
                col(JobItemRow.seq).in_(seqs),
                col(JobItemRow.claimed_by) == consumer,
                col(JobItemRow.claimed_at) == now,
            )
        ).all()
        return [
            Claimed(
                entry_id=str(item.seq),
                tenant=job.tenant,
                job_id=job.job_id,
                index=item.idx,
                item=bytes(item.payload),
            )
            for item, job in rows
        ]

    async def record(self, claimed: Claimed, result: bytes, ok: bool, cost: float) -> bool:
        """Record an item's result once (True if this record counted); the item is done."""
        key = row_key(claimed.tenant, claimed.job_id)

        def work(s: Session) -> bool:
            # Statements, not read-modify-write: the first takes the write lock, so the item
            # and the job's counters change together, and only while the job has not ended
            # (an item still running when it is cancelled is neither recorded nor charged).
            unfinished = select(JobRow.key).where(col(JobRow.key) == key, col(JobRow.state).in_(UNFINISHED))
            counted = s.execute(
                update(JobItemRow)
                .where(
                    col(JobItemRow.seq) == int(claimed.entry_id),
                    col(JobItemRow.result).is_(None),
                    col(JobItemRow.job_key).in_(unfinished),
                )
                .values(result=result, done=True)
            )
            if counted.rowcount != 1:  # type: ignore[attr-defined]
                self._done(s, claimed)
                return False
            counters: dict[str, Any] = {
                "succeeded": col(JobRow.succeeded) + int(ok),
                "failed": col(JobRow.failed) + int(not ok),
                "state": int(State.RUNNING),
            }
            if ok and cost > 0:
                counters.update(cost=col(JobRow.cost) + cost, uncharged=True)
            s.execute(update(JobRow).where(col(JobRow.key) == key).values(**counters))
            s.execute(
                update(JobRow)
                .where(
                    col(JobRow.key) == key, col(JobRow.succeeded) + col(JobRow.failed) >= col(JobRow.total)
                )
                .values(state=int(State.COMPLETED), finished=time.time())
            )
            return True

        return await self._run(work)

    @staticmethod
    def _done(s: Session, claimed: Claimed) -> None:
        s.execute(update(JobItemRow).where(col(JobItemRow.seq) == int(claimed.entry_id)).values(done=True))

    async def ack(self, claimed: Claimed) -> None:
        await self._run(lambda s: self._done(s, claimed))

    async def backlog(self) -> tuple[int, float]:
        """Items not yet done, and the age (s) of the oldest; forgets jobs finished longer
        ago than their retention."""

        def work(s: Session) -> tuple[int, float]:
            now = time.time()
            old = select(JobRow.key).where(
                col(JobRow.state).not_in(UNFINISHED), col(JobRow.finished) < now - RETENTION_S
            )
            s.execute(JobFileRow.__table__.delete().where(col(JobFileRow.created) < now - RETENTION_S))  # type: ignore[attr-defined]
            gone = list(s.exec(old).all())
            if gone:
                s.execute(JobItemRow.__table__.delete().where(col(JobItemRow.job_key).in_(gone)))  # type: ignore[attr-defined]
                s.execute(JobRow.__table__.delete().where(col(JobRow.key).in_(gone)))  # type: ignore[attr-defined]
            pending, oldest = s.exec(
                select(func.count(), func.min(JobRow.created))
                .select_from(JobItemRow)
                .join(JobRow, col(JobRow.key) == col(JobItemRow.job_key))
                .where(col(JobItemRow.done).is_(False))
            ).one()
            return int(pending), max(0.0, now - oldest) if oldest is not None else 0.0

        return await self._run(work)

    async def put_file(
        self, tenant: str, file_id: str, filename: str, content: bytes, created: float, most_bytes: int
    ) -> None:
        row = JobFileRow(
            key=row_key(tenant, file_id),
            tenant=tenant,
            file_id=file_id,
            filename=filename,
            created=created,
            content=content,
        )

        def work(s: Session) -> None:
            day_start = int(created // DAY_S) * DAY_S
            mine = (col(JobFileRow.tenant) == tenant, col(JobFileRow.created) >= day_start)
            today = s.exec(select(func.sum(func.length(JobFileRow.content))).where(*mine)).one()
            if (today or 0) + len(content) > most_bytes:
                raise LimitReached(f"{len(content)} more bytes would pass {most_bytes} uploaded today")
            s.add(row)

        async with self._creating:  # the check and the insert, one at a time
            await self._run(work)

    async def get_file(self, tenant: str, file_id: str) -> StoredFile | None:
        def work(s: Session) -> StoredFile | None:
            row = s.get(JobFileRow, row_key(tenant, file_id))
            return StoredFile(row.file_id, row.filename, row.created, bytes(row.content)) if row else None

        return await self._run(work)

    async def uncharged(self, count: int) -> list[tuple[str, JobRecord | None]]:
        def work(s: Session) -> list[tuple[str, JobRecord | None]]:
            rows = s.exec(select(JobRow).where(col(JobRow.uncharged).is_(True)).limit(count)).all()
            return [(row.key, _record(row)) for row in rows]

        return await self._run(work)

    async def charged(self, key: str) -> None:
        await self._run(
            lambda s: s.execute(update(JobRow).where(col(JobRow.key) == key).values(uncharged=False))
        )
