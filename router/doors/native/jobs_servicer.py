"""The public Jobs servicer: converts gRPC calls to ``ferryman_server.router.jobs.JobDesk`` and its failures
to statuses (same authentication as Inference)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

from ferryman.errors import abort
from ferryman.v1 import jobs_pb2, jobs_pb2_grpc
from ferryman_server.kernel.serving import ServicerContext
from ferryman_server.registry.snapshot import TenantRecord
from ferryman_server.router.doors.native.servicer import calling_tenant
from ferryman_server.router.failures import RequestFailed
from ferryman_server.router.gateway import Gateway
from ferryman_server.router.jobs import JobDesk

T = TypeVar("T")


class JobsServicer(jobs_pb2_grpc.JobsServicer):
    def __init__(self, gateway: Gateway, desk: JobDesk) -> None:
        self._gateway = gateway
        self._desk = desk

    async def _answer(self, context: ServicerContext, work: Callable[[TenantRecord], Awaitable[T]]) -> T:
        """``work`` for the calling tenant; its refusal ends the call with its status."""
        tenant = await calling_tenant(self._gateway, context)
        try:
            return await work(tenant)
        except RequestFailed as failed:
            await abort(context, failed.status)
            raise

    async def SubmitJob(self, request: jobs_pb2.SubmitJobRequest, context: ServicerContext) -> jobs_pb2.Job:
        return await self._answer(context, lambda tenant: self._desk.submit(tenant, request))

    async def GetJob(self, request: jobs_pb2.GetJobRequest, context: ServicerContext) -> jobs_pb2.Job:
        return await self._answer(context, lambda tenant: self._desk.get(tenant, request.job_id))

    async def ListJobs(
        self, request: jobs_pb2.ListJobsRequest, context: ServicerContext
    ) -> jobs_pb2.ListJobsResponse:
        return await self._answer(context, lambda tenant: self._desk.jobs(tenant, request))

    async def CancelJob(self, request: jobs_pb2.CancelJobRequest, context: ServicerContext) -> jobs_pb2.Job:
        return await self._answer(context, lambda tenant: self._desk.cancel(tenant, request.job_id))

    async def GetJobResults(
        self, request: jobs_pb2.GetJobResultsRequest, context: ServicerContext
    ) -> jobs_pb2.GetJobResultsResponse:
        results = await self._answer(
            context, lambda tenant: self._desk.results(tenant, request.job_id, request.offset, request.limit)
        )
        return jobs_pb2.GetJobResultsResponse(results=results)

    async def WatchJob(
        self, request: jobs_pb2.WatchJobRequest, context: ServicerContext
    ) -> AsyncIterator[jobs_pb2.JobEvent]:
        tenant = await calling_tenant(self._gateway, context)
        try:
            async for event in self._desk.watch(tenant, request.job_id):
                yield event
        except RequestFailed as failed:
            await abort(context, failed.status)
