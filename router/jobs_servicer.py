"""The public Jobs servicer: converts gRPC calls to ``router.jobs.JobDesk`` and its failures
to statuses (same authentication as Inference)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from ferryman.errors import abort
from ferryman.kernel.serving import ServicerContext
from ferryman.v1 import jobs_pb2, jobs_pb2_grpc
from registry.snapshot import TenantRecord
from router.auth import bearer_key
from router.gateway import Gateway
from router.jobs import JobDesk
from router.service import RequestFailed


class JobsServicer(jobs_pb2_grpc.JobsServicer):
    def __init__(self, gateway: Gateway, desk: JobDesk) -> None:
        self._gateway = gateway
        self._desk = desk

    async def _tenant(self, context: ServicerContext) -> TenantRecord:
        try:
            return self._gateway.tenant(bearer_key(context.invocation_metadata()))
        except RequestFailed as failed:
            await abort(context, failed.status)
            raise

    async def SubmitJob(self, request: jobs_pb2.SubmitJobRequest, context: ServicerContext) -> jobs_pb2.Job:
        tenant = await self._tenant(context)
        try:
            return await self._desk.submit(tenant, request)
        except RequestFailed as failed:
            await abort(context, failed.status)
            raise

    async def GetJob(self, request: jobs_pb2.GetJobRequest, context: ServicerContext) -> jobs_pb2.Job:
        tenant = await self._tenant(context)
        try:
            return await self._desk.get(tenant, request.job_id)
        except RequestFailed as failed:
            await abort(context, failed.status)
            raise

    async def ListJobs(
        self, request: jobs_pb2.ListJobsRequest, context: ServicerContext
    ) -> jobs_pb2.ListJobsResponse:
        tenant = await self._tenant(context)
        try:
            return await self._desk.jobs(tenant, request)
        except RequestFailed as failed:
            await abort(context, failed.status)
            raise

    async def CancelJob(self, request: jobs_pb2.CancelJobRequest, context: ServicerContext) -> jobs_pb2.Job:
        tenant = await self._tenant(context)
        try:
            return await self._desk.cancel(tenant, request.job_id)
        except RequestFailed as failed:
            await abort(context, failed.status)
            raise

    async def GetJobResults(
        self, request: jobs_pb2.GetJobResultsRequest, context: ServicerContext
    ) -> jobs_pb2.GetJobResultsResponse:
        tenant = await self._tenant(context)
        try:
            results = await self._desk.results(tenant, request.job_id, request.offset, request.limit)
        except RequestFailed as failed:
            await abort(context, failed.status)
            raise
        return jobs_pb2.GetJobResultsResponse(results=results)

    async def WatchJob(
        self, request: jobs_pb2.WatchJobRequest, context: ServicerContext
    ) -> AsyncIterator[jobs_pb2.JobEvent]:
        tenant = await self._tenant(context)
        try:
            async for event in self._desk.watch(tenant, request.job_id):
                yield event
        except RequestFailed as failed:
            await abort(context, failed.status)
