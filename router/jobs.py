"""The Jobs API at the router: checks a job like the requests it holds (the tenant's key,
the model's access, every item against the version's schema, bounds on ids, counts and
sizes), prices it at the job rate, and queues it durably (``ferryman_server.jobs``). Results are
the tenant's alone: a job is keyed by the tenant and its own id, so another tenant's id
finds nothing."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncIterator

import grpc
import redis.asyncio as aioredis
from google.protobuf import timestamp_pb2

from ferryman.durations import seconds_of, set_seconds
from ferryman.errors import Reason
from ferryman.v1 import jobs_pb2
from ferryman_server.jobs.port import JobQueue
from ferryman_server.jobs.store import FINISHED, JobRecord, LimitReached, State, StoredFile
from ferryman_server.kernel.quota import QuotaUnavailable
from ferryman_server.kernel.schema_check import check_inputs
from ferryman_server.registry.cache import SnapshotCache
from ferryman_server.registry.snapshot import TenantRecord, VersionRecord
from ferryman_server.registry.states import ModelFormat
from ferryman_server.router.bounds import MAX_REQUEST_ID_CHARS, check_parameters, clip
from ferryman_server.router.failures import RequestFailed, fail
from ferryman_server.router.job_charges import JobCharges
from ferryman_server.router.service import RouterService
from ferryman_server.router.settings import RouterSettings

MAX_CUSTOM_ID_CHARS = 128
DEFAULT_PAGE = 50
MAX_PAGE = 500
DEFAULT_RESULTS = 100
MAX_RESULTS = 1000
WATCH_POLL_S = 0.5
INLINE_ITEMS = 16
"""Jobs this small are checked on the event loop (as a Predict's inputs are): a thread hop
costs more than they do, and spilled requests (one item each) come by the hundred."""


def _stamp(seconds: float) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    if seconds:
        set_seconds(stamp, seconds)
    return stamp


def to_proto(job: JobRecord) -> jobs_pb2.Job:
    return jobs_pb2.Job(
        job_id=job.job_id,
        model=job.model,
        version=job.version,
        state=int(job.state),  # type: ignore[arg-type]
        total=job.total,
        succeeded=job.succeeded,
        failed=job.failed,
        cost_usd=job.cost_usd,
        created_at=_stamp(job.created),
        expires_at=_stamp(job.expires),
        finished_at=_stamp(job.finished),
    )


def checked_items(request: jobs_pb2.SubmitJobRequest, version: VersionRecord) -> tuple[str, list[bytes]]:
    """The job's digest (what a retry under its id must match) and its items, serialized;
    raises RequestFailed naming the first item that does not fit the version's schema."""
    items: list[bytes] = []
    digest = hashlib.sha256(f"{request.model}\0{version.version}\0".encode())
    for key in sorted(request.parameters):
        digest.update(f"{key}={request.parameters[key]}\0".encode())
    for i, item in enumerate(request.items):
        problems = list(check_inputs(item.inputs, version.schema).violations)
        if len(item.custom_id) > MAX_CUSTOM_ID_CHARS:
            problems.append(("custom_id", f"longer than {MAX_CUSTOM_ID_CHARS} characters"))
        if problems:
            field, why = problems[0]
            raise fail(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"item {i}: {field}: {why}",
                Reason.INVALID_INPUT,
                violations=[(f"items[{i}].{f}", d) for f, d in problems],
            )
        raw = item.SerializeToString(deterministic=True)
        digest.update(raw)
        items.append(raw)
    return digest.hexdigest(), items


def _unavailable(exc: Exception) -> RequestFailed:
    return fail(grpc.StatusCode.UNAVAILABLE, f"the job queue cannot be reached: {exc}", Reason.INTERNAL)


class JobDesk:
    """Protocol-neutral: the servicer converts, this decides."""

    def __init__(
        self,
        settings: RouterSettings,
        service: RouterService,
        cache: SnapshotCache,
        store: JobQueue,
        charges: JobCharges,
    ) -> None:
        self._settings = settings
        self._service = service
        self._cache = cache
        self._store = store
        self._charges = charges

    async def submit(self, tenant: TenantRecord, request: jobs_pb2.SubmitJobRequest) -> jobs_pb2.Job:
        limits = self._settings
        violations = []
        if not request.job_id or len(request.job_id) > MAX_REQUEST_ID_CHARS:
            violations.append(("job_id", f"required, at most {MAX_REQUEST_ID_CHARS} characters"))
        if not 1 <= len(request.items) <= limits.job_max_items:
            violations.append(("items", f"1 to {limits.job_max_items} items"))
        # The same bounds as a real-time request's: a job's parameters go to every item.
        violations += check_parameters(request.parameters)
        window = seconds_of(request.completion_window) or limits.job_window_s
        if not 0 < window <= limits.job_max_window_s:
            violations.append(("completion_window", f"at most {limits.job_max_window_s:g} s"))
        if violations:
            raise fail(
                grpc.StatusCode.INVALID_ARGUMENT, "invalid job", Reason.INVALID_REQUEST, violations=violations
            )
        # Where a Predict would go (pin, weights, the allow-list), but never to a fallback.
        _, version = self._service.route(tenant, request.model, request.version, "", False, fallback=False)
        if version.format == ModelFormat.CAUSAL_LM:
            raise fail(grpc.StatusCode.FAILED_PRECONDITION, "jobs run Predict models", Reason.INVALID_REQUEST)
        if len(request.items) <= INLINE_ITEMS:
            digest, items = checked_items(request, version)
        else:  # up to job_max_items to check: off the event loop, which serves everyone's requests
            digest, items = await asyncio.to_thread(checked_items, request, version)
        now = time.time()
        factor = limits.job_price_factor
        record = JobRecord(
            tenant=tenant.name,
            job_id=request.job_id,
            model=request.model,
            version=version.version,
            state=State.QUEUED,
            total=len(items),
            succeeded=0,
            failed=0,
            cost_usd=0.0,
            created=now,
            expires=now + window,
            finished=0.0,
            digest=digest,
            parameters=dict(request.parameters),
            price_per_item_usd=version.price_per_item_usd * factor,
            price_per_1k_tokens_usd=version.price_per_1k_tokens_usd * factor,
        )
        policy = next((p for p in self._cache.snapshot.policies.get(tenant.name, []) if not p.model), None)
        try:
            at_limit = await self._charges.at_limit(tenant.name, request.model, request.job_id)
        except QuotaUnavailable as exc:
            raise fail(grpc.StatusCode.UNAVAILABLE, str(exc), Reason.QUOTA_UNAVAILABLE) from None
        if at_limit:
            raise fail(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                "job refused: the tenant's daily cost limit is reached",
                Reason.QUOTA_EXCEEDED,
                quota_violations=[(f"{tenant.name}:cost_per_day", "reached")],
            )
        try:
            async with asyncio.timeout(limits.job_store_timeout_s * 4):
                job = await self._store.create(
                    record,
                    items,
                    most_jobs=policy.limits.jobs_in_flight if policy else None,
                    most_items=policy.limits.job_items_per_day if policy else None,
                )
        except LimitReached as exc:
            raise fail(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"job refused: {exc}",
                Reason.QUOTA_EXCEEDED,
                quota_violations=[(f"tenant:{tenant.name}", str(exc))],
            ) from None
        except (OSError, TimeoutError, aioredis.RedisError) as exc:
            raise _unavailable(exc) from None
        if job.digest != record.digest:
            raise fail(
                grpc.StatusCode.ALREADY_EXISTS,
                f"job {clip(request.job_id)!r} exists with other items",
                Reason.REQUEST_ID_REUSED,
            )
        return to_proto(job)

    async def job(self, tenant: TenantRecord, job_id: str) -> JobRecord:
        """The tenant's job (NOT_FOUND for another's id); one past its window is expired."""
        try:
            job = await self._store.get(tenant.name, job_id)
        except (OSError, aioredis.RedisError) as exc:
            raise _unavailable(exc) from None
        if job is None:
            raise fail(grpc.StatusCode.NOT_FOUND, f"no job {clip(job_id)!r}", Reason.UNKNOWN_REQUEST)
        if job.state not in FINISHED and job.expires <= time.time():
            job = await self._store.finish(tenant.name, job_id, State.EXPIRED) or job
        return job

    async def exists(self, tenant: TenantRecord, job_id: str) -> bool:
        """Whether the tenant has a job of this id (of any state)."""
        try:
            return await self._store.exists(tenant.name, job_id)
        except (OSError, aioredis.RedisError) as exc:
            raise _unavailable(exc) from None

    async def put_file(self, tenant: TenantRecord, file_id: str, filename: str, content: bytes) -> StoredFile:
        """Keep a tenant's uploaded file (a batch input; its size bounded by the door)."""
        stored = StoredFile(file_id, filename, time.time(), content)
        most = self._settings.job_file_bytes_per_day
        try:
            await self._store.put_file(tenant.name, file_id, filename, content, stored.created, most)
        except LimitReached as exc:
            raise fail(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"file refused: {exc}",
                Reason.QUOTA_EXCEEDED,
                quota_violations=[(f"{tenant.name}:job_file_bytes_per_day", str(exc))],
            ) from None
        except (OSError, aioredis.RedisError) as exc:
            raise _unavailable(exc) from None
        return stored

    async def file(self, tenant: TenantRecord, file_id: str) -> StoredFile:
        """The tenant's file (NOT_FOUND for another's id)."""
        try:
            stored = await self._store.get_file(tenant.name, file_id)
        except (OSError, aioredis.RedisError) as exc:
            raise _unavailable(exc) from None
        if stored is None:
            raise fail(grpc.StatusCode.NOT_FOUND, f"no file {clip(file_id)!r}", Reason.UNKNOWN_REQUEST)
        return stored

    async def get(self, tenant: TenantRecord, job_id: str) -> jobs_pb2.Job:
        return to_proto(await self.job(tenant, job_id))

    async def jobs(
        self, tenant: TenantRecord, request: jobs_pb2.ListJobsRequest
    ) -> jobs_pb2.ListJobsResponse:
        size = min(request.page_size or DEFAULT_PAGE, MAX_PAGE)
        try:
            jobs = await self._store.jobs(tenant.name, size, request.page_token[:MAX_REQUEST_ID_CHARS])
        except (OSError, aioredis.RedisError) as exc:
            raise _unavailable(exc) from None
        token = jobs[-1].job_id if len(jobs) == size else ""
        return jobs_pb2.ListJobsResponse(jobs=[to_proto(j) for j in jobs], next_page_token=token)

    async def cancel(self, tenant: TenantRecord, job_id: str) -> jobs_pb2.Job:
        await self.job(tenant, job_id)
        try:
            job = await self._store.finish(tenant.name, job_id, State.CANCELLED)
        except (OSError, aioredis.RedisError) as exc:
            raise _unavailable(exc) from None
        assert job is not None
        return to_proto(job)

    async def results(
        self, tenant: TenantRecord, job_id: str, offset: int, limit: int
    ) -> list[jobs_pb2.JobItemResult]:
        job = await self.job(tenant, job_id)
        offset = max(0, offset)
        limit = min(limit or DEFAULT_RESULTS, MAX_RESULTS, max(0, job.total - offset))
        try:
            raw = await self._store.results(tenant.name, job_id, offset, limit)
        except (OSError, aioredis.RedisError) as exc:
            raise _unavailable(exc) from None
        return [jobs_pb2.JobItemResult.FromString(raw[i]) for i in sorted(raw)]

    async def watch(self, tenant: TenantRecord, job_id: str) -> AsyncIterator[jobs_pb2.JobEvent]:
        """Progress and new results until the job ends. Results are read only when the job's
        progress moved past what was sent, and only the pages not sent whole yet."""
        sent: set[int] = set()
        while True:
            job = await self.job(tenant, job_id)
            fresh: list[jobs_pb2.JobItemResult] = []
            if job.succeeded + job.failed > len(sent):
                for offset in range(0, job.total, MAX_RESULTS):
                    end = min(job.total, offset + MAX_RESULTS)
                    if all(i in sent for i in range(offset, end)):
                        continue
                    try:
                        raw = await self._store.results(tenant.name, job_id, offset, end - offset)
                    except (OSError, aioredis.RedisError) as exc:
                        raise _unavailable(exc) from None
                    for index in sorted(set(raw) - sent):
                        sent.add(index)
                        fresh.append(jobs_pb2.JobItemResult.FromString(raw[index]))
            yield jobs_pb2.JobEvent(job=to_proto(job), results=fresh)
            if job.state in FINISHED:
                return
            await asyncio.sleep(WATCH_POLL_S)
