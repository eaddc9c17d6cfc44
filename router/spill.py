"""Spill instead of shed: a Predict refused for load or a rate quota is accepted as a
one-item durable job (``ferryman_server.router.jobs.JobDesk``), so a caller that opted in loses nothing it
sent. The job's id derives from the tenant's request id (``ferryman.errors.spill_job_id``):
a retry of the same request finds the same job, never a second one, and the job is charged
once, at the job price, when its item completes (the refused real-time try never was)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable

import grpc
from google.rpc import error_details_pb2, status_pb2

from ferryman.errors import (
    JOB_ID,
    REFUSED_FOR,
    Reason,
    make_status,
    reason_of,
    spill_job_id,
    status_code,
    unpack_details,
)
from ferryman.v1 import inference_pb2, jobs_pb2
from ferryman_server.registry.snapshot import TenantRecord
from ferryman_server.router.failures import RequestFailed
from ferryman_server.router.jobs import JobDesk
from ferryman_server.router.metrics import RouterMetrics
from ferryman_server.router.settings import RouterSettings

LOAD = frozenset(
    {
        Reason.OVERLOADED,
        Reason.QUEUE_FULL,
        Reason.DEADLINE_UNMEETABLE,
        Reason.DEADLINE_TOO_SHORT,
        Reason.DEADLINE,
        Reason.NO_ROOM,
    }
)
"""Refusals that say the platform could not answer in time (no node had room to load the
version, too): worth queueing for later."""
RATE_LIMITS = frozenset({"rpm", "tpm", "burst", "max_concurrency"})
"""Quota limits that only pace a tenant: a job later does not break them. The daily cost
limit is not among them: a job would spend what the tenant may not."""


def spillable(status: status_pb2.Status) -> bool:
    """Whether a refusal may be turned into a job: load, or rate limits only."""
    reason = reason_of(status)
    if reason in LOAD:
        return True
    if reason != Reason.QUOTA_EXCEEDED:
        return False
    quota = unpack_details(status).get("QuotaFailure")
    if not isinstance(quota, error_details_pb2.QuotaFailure) or not quota.violations:
        return False
    return all(v.subject.rsplit(":", 1)[-1] in RATE_LIMITS for v in quota.violations)


def accepted(refusal: status_pb2.Status, job_id: str) -> status_pb2.Status:
    """The answer of a spilled request: the refusal's code, reason ACCEPTED_AS_JOB."""
    return make_status(
        status_code(refusal),
        f"{refusal.message}; accepted as job {job_id}, whose result answers it",
        reason=Reason.ACCEPTED_AS_JOB,
        metadata={JOB_ID: job_id, REFUSED_FOR: reason_of(refusal)},
    )


class Spill:
    """Turns spillable refusals of requests that opted in into jobs."""

    def __init__(self, settings: RouterSettings, desk: JobDesk, metrics: RouterMetrics) -> None:
        self._margin_s = settings.spill_margin_s
        self._desk = desk
        self._metrics = metrics
        self._earlier = make_status(
            grpc.StatusCode.RESOURCE_EXHAUSTED, "this request was refused before", reason=""
        )
        """What a retry of a spilled request is told it was refused for (the first refusal
        itself is not kept: its job is)."""

    async def run(
        self,
        tenant: TenantRecord,
        request: inference_pb2.PredictRequest,
        deadline: float,
        answer: Callable[[float], Awaitable[inference_pb2.PredictResponse]],
    ) -> inference_pb2.PredictResponse:
        """``answer(deadline)`` in real time, leaving the margin to queue the job in; a
        spillable refusal raises RequestFailed with the ACCEPTED_AS_JOB status instead."""
        # The job is named after the request: it needs an id before the first try.
        if not request.request_id:
            request.request_id = uuid.uuid4().hex
            request.generated_request_id = True  # the router's own: it keeps no answer
        elif await self._desk.exists(tenant, spill_job_id(request.request_id)):
            # A retry of a request that was spilled: its job answers it, once and charged
            # once; running it again now would answer (and charge) it twice.
            raise RequestFailed(accepted(self._earlier, spill_job_id(request.request_id)))
        try:
            return await answer(deadline - self._margin_s)
        except RequestFailed as failed:
            status = await self.accept(tenant, request, failed.status)
            if status is None:
                raise
        self._metrics.child(self._metrics.spilled, self._metrics.tenant(tenant.name), request.model).inc()
        raise RequestFailed(status)

    @staticmethod
    def wanted(request: inference_pb2.PredictRequest, tenant: TenantRecord) -> bool:
        """The request asks to spill, or its tenant's policy does for every request."""
        return request.spill_to_job or tenant.spill_to_job

    async def accept(
        self, tenant: TenantRecord, request: inference_pb2.PredictRequest, refusal: status_pb2.Status
    ) -> status_pb2.Status | None:
        """The status that answers ``request`` once its job is queued; None when the
        refusal is not one to spill. When the job is refused too (the tenant's job limits,
        the queue unreachable), the refusal is raised with why: nothing was accepted."""
        if not spillable(refusal):
            return None
        job_id = spill_job_id(request.request_id)
        job = jobs_pb2.SubmitJobRequest(
            job_id=job_id,
            model=request.model,
            version=request.version,
            items=[jobs_pb2.JobItem(custom_id=request.request_id, inputs=request.inputs)],
            parameters=request.parameters,
        )
        try:
            # Once decided, the job is queued even if the caller gives up meanwhile (its call
            # cancelled at its deadline): the SDK looks it up, and a retry finds it.
            await asyncio.shield(self._desk.submit(tenant, job))
        except RequestFailed as failed:
            # The refusal stands (its code, reason and retry delay), saying why no job either.
            status = status_pb2.Status()
            status.CopyFrom(refusal)
            status.message = f"{refusal.message}; not accepted as a job: {failed.status.message}"
            raise RequestFailed(status) from None
        return accepted(refusal, job_id)
