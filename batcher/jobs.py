"""The batcher's job worker: takes job items from the durable queue (``ferryman_server.jobs``) and
runs them through this batcher's own queues under the tenant's background scope, so they
use only the capacity real-time traffic leaves, then records each result once.

An item that found no capacity in time (or no replica) is not acknowledged: it stays
pending and is taken again after ``job_claim_idle_s`` (by this worker or another), as is
every item of a worker that died. Items of a job that ended (cancelled, expired) are
dropped unrun, so they are never charged. While this batcher refuses tenants' items (it
sheds), the worker takes no new ones.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable

import grpc
import redis.asyncio as aioredis

from ferryman.errors import NO_CAPACITY
from ferryman.v1 import batcher_pb2, common_pb2, jobs_pb2
from ferryman_server.batcher.local import LocalBatcher
from ferryman_server.batcher.metrics import BatcherMetrics
from ferryman_server.batcher.service import item_rows
from ferryman_server.batcher.settings import BatcherSettings
from ferryman_server.jobs.port import JobQueue
from ferryman_server.jobs.store import FINISHED, Claimed, JobRecord, State
from ferryman_server.kernel.scopes import job_scope

log = logging.getLogger("ferryman.batcher.jobs")
RETRY_LATER = NO_CAPACITY | {grpc.StatusCode.NOT_FOUND.value[0]}
"""Outcomes that say nothing about the item: no capacity or replica in time, or a version
this batcher has not read yet. Taken again later, until the job's window closes."""
BACKOFF_S = 1.0
BACKLOG_EVERY_S = 5.0
"""How often the worker reads the queue's backlog into its gauges."""
JOB_CACHE_S = 1.0
"""How long a job's state is trusted before it is read again (a cancel takes this long)."""
MAX_CACHED_JOBS = 1024


class JobWorker:
    def __init__(
        self,
        store: JobQueue,
        batcher: LocalBatcher,
        settings: BatcherSettings,
        metrics: BatcherMetrics,
        shed_at: Callable[[], float],
    ) -> None:
        self._shed_at = shed_at
        self._store = store
        self._batcher = batcher
        self._settings = settings
        self._metrics = metrics
        self._backlog_at = 0.0
        self.consumer = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._jobs: dict[tuple[str, str], tuple[float, JobRecord | None]] = {}
        self._running: set[asyncio.Task[None]] = set()

    async def run(self, stop: asyncio.Event) -> None:
        """Take and run items until ``stop``; Redis down: wait and try again."""
        limit = self._settings.job_max_inflight
        while not stop.is_set():
            free = limit - len(self._running)
            if time.monotonic() - self._shed_at() < self._settings.job_shed_pause_s:
                await asyncio.sleep(self._settings.job_shed_pause_s)  # tenants are being refused
                continue
            if free <= 0:
                await asyncio.wait(self._running, return_when=asyncio.FIRST_COMPLETED)
                continue
            try:
                await self._store.ensure_group()
                await self._gauge_backlog()
                claimed = await self._store.claim(
                    self.consumer,
                    free,
                    block_ms=int(self._settings.job_read_block_s * 1000),
                    idle_ms=int(self._settings.job_claim_idle_s * 1000),
                )
            except (OSError, aioredis.RedisError) as exc:
                log.warning("job queue unreachable (%s); trying again", exc)
                await asyncio.sleep(BACKOFF_S)
                continue
            for entry in claimed:
                task = asyncio.create_task(self._run_one(entry))
                self._running.add(task)
                task.add_done_callback(self._running.discard)
        for task in list(self._running):
            task.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)

    async def _gauge_backlog(self) -> None:
        now = time.monotonic()
        if now - self._backlog_at < BACKLOG_EVERY_S:
            return
        self._backlog_at = now
        items, oldest_s = await self._store.backlog()
        self._metrics.job_backlog.set(items)
        self._metrics.job_oldest.set(oldest_s)

    async def _job(self, tenant: str, job_id: str) -> JobRecord | None:
        now = time.monotonic()
        cached = self._jobs.get((tenant, job_id))
        if cached is not None and cached[0] > now:
            return cached[1]
        job = await self._store.get(tenant, job_id)
        if len(self._jobs) >= MAX_CACHED_JOBS:  # jobs come and go: keep only the fresh ones
            self._jobs = {k: v for k, v in self._jobs.items() if v[0] > now}
        self._jobs[(tenant, job_id)] = (now + JOB_CACHE_S, job)
        return job

    async def _run_one(self, entry: Claimed) -> None:
        try:
            job = await self._job(entry.tenant, entry.job_id)
            if job is None or job.state in FINISHED or job.expires <= time.time():
                if job is not None and job.state not in FINISHED:
                    await self._store.finish(entry.tenant, entry.job_id, State.EXPIRED)
                await self._store.ack(entry)  # ended (or gone): never run, never charged
                self._metrics.job_items.labels("dropped").inc()
                return
            item = jobs_pb2.JobItem.FromString(entry.item)
            result = await self._submit(job, entry, item)
            if result.status.code in RETRY_LATER:
                self._metrics.job_items.labels("retried").inc()
                return  # left pending: taken again once idle
            answer = jobs_pb2.JobItemResult(index=entry.index, custom_id=item.custom_id, usage=result.usage)
            ok = result.status.code == 0
            if ok:
                answer.outputs.extend(result.outputs)
            else:
                answer.error.CopyFrom(result.status)
            cost = result.usage.cost_usd if ok else 0.0
            await self._store.record(entry, answer.SerializeToString(), ok, cost)
            self._metrics.job_items.labels("answered" if ok else "failed").inc()
        except (OSError, aioredis.RedisError) as exc:
            log.warning(
                "job item %s/%d not recorded (%s); it will be taken again", entry.job_id, entry.index, exc
            )

    async def _submit(self, job: JobRecord, entry: Claimed, item: jobs_pb2.JobItem) -> batcher_pb2.ItemResult:
        timeout_s = self._settings.job_item_timeout_s
        submit = batcher_pb2.SubmitItem(
            request_id=f"{job_scope(entry.tenant)}/{entry.job_id}/{entry.index}/{uuid.uuid4().hex[:8]}",
            tenant=job_scope(entry.tenant),
            model=job.model,
            version=job.version,
            parameters=job.parameters,
            priority=common_pb2.PRIORITY_LOW,
            inputs=item.inputs,
        )
        submit.time_budget.FromSeconds(int(timeout_s))
        deadline = asyncio.get_running_loop().time() + timeout_s
        result = await self._batcher.submit(submit, deadline)
        if result.status.code == 0:
            tokens = result.usage.input_tokens + result.usage.output_tokens
            per_row, per_1k = job.price_per_item_usd, job.price_per_1k_tokens_usd
            result.usage.cost_usd = item_rows(submit) * per_row + tokens / 1000 * per_1k
        return result
