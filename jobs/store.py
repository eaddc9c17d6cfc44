"""Jobs on Redis: a job is a hash, its items are entries of one stream read by the batchers'
workers as a consumer group, its results a hash by item index.

Delivery is at least once (a worker that dies leaves its entries pending until another
claims them, ``XAUTOCLAIM``); the effect is exactly once: a result is recorded by
``HSETNX`` on the item's index, and only the first record counts toward the job's
progress and cost (one Lua script, atomic with the check).

Keys (``prefix`` is ``ferryman:``): ``jobs:stream`` (the items), ``job:<id>`` (a job's
hash, id = sha256 of tenant and the tenant's job id, so neither can forge another's key),
``job:<id>:results``, ``jobs:<tenant digest>`` (a tenant's jobs by creation time).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, fields
from enum import IntEnum
from typing import Any, get_origin, get_type_hints

import redis.asyncio as aioredis

PREFIX = "ferryman:"
STREAM = PREFIX + "jobs:stream"
UNCHARGED = PREFIX + "jobs:uncharged"
"""Keys of jobs whose cost grew since it was last charged to their tenants' spend."""
GROUP = "workers"
RETENTION_S = 7 * 86_400
"""How long a finished job and its results are kept."""


class State(IntEnum):
    """As ``ferryman.v1.JobState``."""

    QUEUED = 1
    RUNNING = 2
    COMPLETED = 3
    CANCELLED = 4
    EXPIRED = 5


FINISHED = frozenset({State.COMPLETED, State.CANCELLED, State.EXPIRED})

# KEYS: job hash, results hash, tenant's unfinished jobs, jobs with cost not yet charged to
# their tenants. ARGV: index, result bytes, ok (1/0), cost, now, retention.
# The first record of an item counts; the last one to count completes the job.
RECORD = """
local job = KEYS[1]
local state = tonumber(redis.call('HGET', job, 'state') or '0')
if state == 0 then return -1 end
-- Ended (cancelled, expired): an item still running then is neither recorded nor charged.
if state >= 3 then return 0 end
if redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2]) == 0 then return 0 end
if ARGV[3] == '1' then
  redis.call('HINCRBY', job, 'succeeded', 1)
  redis.call('HINCRBYFLOAT', job, 'cost', ARGV[4])
  if tonumber(ARGV[4]) > 0 then redis.call('SADD', KEYS[4], job) end
else
  redis.call('HINCRBY', job, 'failed', 1)
end
local h = redis.call('HMGET', job, 'succeeded', 'failed', 'total')
if state == 1 then redis.call('HSET', job, 'state', 2) end
if tonumber(h[1]) + tonumber(h[2]) >= tonumber(h[3]) and (state == 1 or state == 2) then
  redis.call('HSET', job, 'state', 3, 'finished', ARGV[5])
  redis.call('EXPIRE', job, ARGV[6])
  redis.call('EXPIRE', KEYS[2], ARGV[6])
  redis.call('DECR', KEYS[3])
end
return 1
"""

# KEYS: job hash, tenant index, tenant's unfinished jobs, tenant's items today. ARGV: job id,
# created, most unfinished jobs (0: any), most items a day (0: any), items, seconds the day
# counter lives, then field/value pairs. 1: created; 0: a job exists under the id; -2: too
# many unfinished jobs; -3: too many items today.
CREATE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local most_jobs, most_items, items = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
if most_jobs > 0 and tonumber(redis.call('GET', KEYS[3]) or '0') >= most_jobs then return -2 end
if most_items > 0 and tonumber(redis.call('GET', KEYS[4]) or '0') + items > most_items then return -3 end
redis.call('HSET', KEYS[1], unpack(ARGV, 7))
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
redis.call('INCR', KEYS[3])
redis.call('INCRBY', KEYS[4], items)
redis.call('EXPIRE', KEYS[4], ARGV[6])
return 1
"""

# KEYS: job hash, tenant's unfinished jobs. ARGV: state, now, retention. Ends a job that has
# not ended.
FINISH = """
local state = tonumber(redis.call('HGET', KEYS[1], 'state') or '0')
if state == 0 then return -1 end
if state >= 3 then return state end
redis.call('HSET', KEYS[1], 'state', ARGV[1], 'finished', ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('DECR', KEYS[2])
return tonumber(ARGV[1])
"""


def job_key(tenant: str, job_id: str) -> str:
    return PREFIX + "job:" + hashlib.sha256(f"{tenant}\0{job_id}".encode()).hexdigest()


def file_key(tenant: str, file_id: str) -> str:
    return PREFIX + "file:" + hashlib.sha256(f"{tenant}\0{file_id}".encode()).hexdigest()


@dataclass(frozen=True)
class StoredFile:
    """A tenant's uploaded file."""

    file_id: str
    filename: str
    created: float
    content: bytes


def tenant_key(tenant: str, what: str = "") -> str:
    """The tenant's job index (or, with ``what``, one of its counters)."""
    return PREFIX + "jobs:" + hashlib.sha256(tenant.encode()).hexdigest() + (f":{what}" if what else "")


DAY_S = 86_400


class LimitReached(Exception):
    """The tenant's job limits refuse a new job (the message says which)."""


@dataclass(frozen=True)
class JobRecord:
    tenant: str
    job_id: str
    model: str
    version: str
    state: State
    total: int
    succeeded: int
    failed: int
    cost_usd: float
    created: float
    expires: float
    finished: float
    digest: str
    """sha256 of what was submitted: a retry under the job id must match it."""
    parameters: dict[str, str]
    price_per_item_usd: float
    """The job price of one row (the version's, times the job price factor)."""
    price_per_1k_tokens_usd: float


@dataclass(frozen=True)
class Claimed:
    """A stream entry a worker holds until it acknowledges it."""

    entry_id: str
    tenant: str
    job_id: str
    index: int
    item: bytes


STORED_NAMES = {"cost_usd": "cost", "price_per_item_usd": "price", "price_per_1k_tokens_usd": "price_1k"}
"""Record fields stored under another name (Redis hash fields and SQL columns alike)."""
COUNTERS = ("succeeded", "failed", "cost_usd", "finished")
"""Fields a stored job may lack (they start at 0)."""


_HINTS = get_type_hints(JobRecord)
_STORED_FIELDS = [(f.name, STORED_NAMES.get(f.name, f.name), _HINTS[f.name]) for f in fields(JobRecord)]
"""(record field, stored name, declared type), worked out once: records are read by the
hundred (a job list, a charging pass)."""


def stored(record: JobRecord) -> dict[str, Any]:
    """A record's fields under their stored names; the parameters as a dict."""
    values = {name: getattr(record, field_name) for field_name, name, _ in _STORED_FIELDS}
    values["state"] = int(record.state)
    return values


def from_stored(values: Mapping[str, Any]) -> JobRecord:
    """A record from its stored fields (as strings, from Redis, or typed, from SQL), each
    converted to the record's declared type."""
    made: dict[str, Any] = {}
    for field_name, name, kind in _STORED_FIELDS:
        raw = values.get(name, 0) if field_name in COUNTERS else values[name]
        if kind is State:
            made[field_name] = State(int(raw))
        elif get_origin(kind) is dict:
            made[field_name] = json.loads(raw) if isinstance(raw, str) else dict(raw)
        else:
            made[field_name] = kind(raw)
    return JobRecord(**made)


def _record(raw: dict[Any, Any]) -> JobRecord | None:
    if not raw:
        return None
    return from_stored({k.decode(): v.decode() for k, v in raw.items()})


class JobStore:
    """The Redis side of jobs, for the router (submit, read, cancel) and workers (claim,
    record, acknowledge). Every call is bounded by ``timeout_s``."""

    def __init__(self, url: str, timeout_s: float) -> None:
        # Any: redis-py types every reply as a union of its sync and async shapes.
        self._redis: Any = aioredis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        self._create = self._redis.register_script(CREATE)
        self._record = self._redis.register_script(RECORD)
        self._finish = self._redis.register_script(FINISH)

    async def close(self) -> None:
        await self._redis.aclose()

    async def create(
        self,
        record: JobRecord,
        items: list[bytes],
        most_jobs: int | None = None,
        most_items: int | None = None,
    ) -> JobRecord:
        """Store a new job and queue its items; a job already under the id is returned as
        it is (the caller compares digests). A job whose items a crashed router had not all
        queued yet (``queuing`` still set) gets them queued again: a duplicate entry is
        harmless, only an item's first result counts."""
        key = job_key(record.tenant, record.job_id)
        values = stored(record) | {"state": int(State.QUEUED), "queuing": 1}
        values["parameters"] = json.dumps(record.parameters, sort_keys=True)
        pairs = [str(x) for kv in values.items() for x in kv]
        day = int(record.created // DAY_S)
        keys = [key, tenant_key(record.tenant), tenant_key(record.tenant, "unfinished")]
        keys.append(tenant_key(record.tenant, f"items:{day}"))
        created = await self._create(
            keys=keys,
            args=[
                record.job_id,
                record.created,
                most_jobs or 0,
                most_items or 0,
                len(items),
                2 * DAY_S,
                *pairs,
            ],
        )
        if created == -2:
            raise LimitReached(f"{most_jobs} unfinished jobs already (jobs_in_flight)")
        if created == -3:
            raise LimitReached(f"{len(items)} more items would pass {most_items} today (job_items_per_day)")
        if created or await self._redis.hexists(key, "queuing"):
            pipe = self._redis.pipeline(transaction=False)
            for index, item in enumerate(items):
                pipe.xadd(STREAM, {"t": record.tenant, "j": record.job_id, "i": index, "p": item})
            pipe.hdel(key, "queuing")
            await pipe.execute()
        found = await self.get(record.tenant, record.job_id)
        if found is None:
            raise KeyError(f"job {record.job_id!r} vanished while being created")
        return found

    async def exists(self, tenant: str, job_id: str) -> bool:
        return bool(await self._redis.exists(job_key(tenant, job_id)))

    async def get(self, tenant: str, job_id: str) -> JobRecord | None:
        return _record(await self._redis.hgetall(job_key(tenant, job_id)))

    async def jobs(self, tenant: str, limit: int, before: str = "") -> list[JobRecord]:
        """The tenant's jobs, newest first, after ``before`` (a job id) when given."""
        key = tenant_key(tenant)
        start = 0
        if before:
            rank = await self._redis.zrevrank(key, before)
            start = 0 if rank is None else rank + 1
        ids = await self._redis.zrevrange(key, start, start + limit - 1)
        pipe = self._redis.pipeline(transaction=False)  # one round trip for the page
        for raw in ids:
            pipe.hgetall(job_key(tenant, raw.decode()))
        return [job for job in map(_record, await pipe.execute()) if job is not None]

    async def finish(self, tenant: str, job_id: str, state: State) -> JobRecord | None:
        """End a job (cancelled, expired) unless it has ended; the job as it is then."""
        keys = [job_key(tenant, job_id), tenant_key(tenant, "unfinished")]
        await self._finish(keys=keys, args=[int(state), time.time(), RETENTION_S])
        return await self.get(tenant, job_id)

    async def results(self, tenant: str, job_id: str, offset: int, limit: int) -> dict[int, bytes]:
        """Recorded results in [offset, offset + limit), by index."""
        indexes = list(range(offset, offset + limit))
        if not indexes:
            return {}
        raw = await self._redis.hmget(job_key(tenant, job_id) + ":results", [str(i) for i in indexes])
        return {i: r for i, r in zip(indexes, raw, strict=True) if r is not None}

    # -- workers ---------------------------------------------------------------

    async def ensure_group(self) -> None:
        try:
            await self._redis.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
        except aioredis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def claim(self, consumer: str, count: int, block_ms: int, idle_ms: int) -> list[Claimed]:
        """Entries for ``consumer``: first those another consumer left pending for
        ``idle_ms`` (it died), then new ones (waiting up to ``block_ms``)."""
        _, stolen, _ = await self._redis.xautoclaim(STREAM, GROUP, consumer, idle_ms, "0-0", count=count)
        entries = list(stolen)
        if len(entries) < count:
            read = await self._redis.xreadgroup(
                GROUP, consumer, {STREAM: ">"}, count=count - len(entries), block=block_ms
            )
            for _, batch in read or []:
                entries += batch
        return [
            Claimed(
                entry_id=eid.decode(),
                tenant=f[b"t"].decode(),
                job_id=f[b"j"].decode(),
                index=int(f[b"i"]),
                item=f[b"p"],
            )
            for eid, f in entries
            if f
        ]

    async def record(self, claimed: Claimed, result: bytes, ok: bool, cost: float) -> bool:
        """Record an item's result once (True if this record counted) and acknowledge it."""
        key = job_key(claimed.tenant, claimed.job_id)
        counted = await self._record(
            keys=[key, key + ":results", tenant_key(claimed.tenant, "unfinished"), UNCHARGED],
            args=[claimed.index, result, 1 if ok else 0, cost, time.time(), RETENTION_S],
        )
        await self.ack(claimed)
        return bool(counted == 1)

    async def put_file(
        self, tenant: str, file_id: str, filename: str, content: bytes, created: float, most_bytes: int
    ) -> None:
        """Keep a tenant's uploaded file (a batch input) for the jobs' retention; LimitReached
        past ``most_bytes`` uploaded this UTC day."""
        today = tenant_key(tenant, f"file_bytes:{int(created // DAY_S)}")
        if await self._redis.incrby(today, len(content)) > most_bytes:
            await self._redis.decrby(today, len(content))
            raise LimitReached(f"{len(content)} more bytes would pass {most_bytes} uploaded today")
        await self._redis.expire(today, 2 * DAY_S)
        key = file_key(tenant, file_id)
        pipe = self._redis.pipeline(transaction=True)
        pipe.hset(key, mapping={"filename": filename, "created": created, "content": content})
        pipe.expire(key, RETENTION_S)
        await pipe.execute()

    async def get_file(self, tenant: str, file_id: str) -> StoredFile | None:
        raw = await self._redis.hgetall(file_key(tenant, file_id))
        if not raw:
            return None
        return StoredFile(file_id, raw[b"filename"].decode(), float(raw[b"created"]), raw[b"content"])

    async def uncharged(self, count: int) -> list[tuple[str, JobRecord | None]]:
        """Up to ``count`` jobs whose cost may not be charged yet, by key (None: the job is
        gone)."""
        keys = [k.decode() for k in await self._redis.srandmember(UNCHARGED, count)]
        pipe = self._redis.pipeline(transaction=False)
        for key in keys:
            pipe.hgetall(key)
        return list(zip(keys, [_record(fields) for fields in await pipe.execute()], strict=True))

    async def charged(self, key: str) -> None:
        """The job's cost is charged in full and can grow no more (it ended, or is gone)."""
        await self._redis.srem(UNCHARGED, key)

    async def ack(self, claimed: Claimed) -> None:
        pipe = self._redis.pipeline(transaction=False)
        pipe.xack(STREAM, GROUP, claimed.entry_id)
        pipe.xdel(STREAM, claimed.entry_id)
        await pipe.execute()

    async def backlog(self) -> tuple[int, float]:
        """Items not yet acknowledged, and the age (s) of the oldest."""
        info = await self._redis.xinfo_groups(STREAM)
        pending = sum(int(g.get("pending", 0)) + int(g.get("lag", 0) or 0) for g in info)
        first = await self._redis.xrange(STREAM, count=1)
        age = time.time() - int(first[0][0].decode().split("-")[0]) / 1000 if first else 0.0
        return pending, max(0.0, age)
