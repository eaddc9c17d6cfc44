"""A request that may spill into a job (``spill_to_job``) and got no answer in time: the
router may have queued its job all the same, its answer too late for the call. A short
lookup of the job the request names (``ferryman.errors.spill_job_id``), looked for twice
(the router may be queuing it as the call gives up), tells the caller,
so no accepted request looks lost; not found, the call's own timeout error stands (a retry
under the same request id would find a job queued since)."""

from __future__ import annotations

import asyncio
import time

import grpc

from ferryman.errors import Reason, spill_job_id
from ferryman.sdk.errors import AcceptedAsJob, DeadlineExceeded, FerrymanError
from ferryman.v1 import inference_pb2, jobs_pb2, jobs_pb2_grpc

LOOKUP_TIMEOUT_S = 0.4
"""How long one look may take."""
LOOK_AGAIN_S = 0.2
"""The router may still be queuing the job when the call gives up: one more look after this
(both looks together take at most a second past the call's timeout)."""
LOOKS = 2
Metadata = tuple[tuple[str, str], ...]


def _worth_a_look(request: inference_pb2.PredictRequest, late: FerrymanError) -> bool:
    # The call's own deadline, or the router's passing while it queued the job: either way
    # the job may be there.
    return request.spill_to_job and isinstance(late, DeadlineExceeded)


def _found(request: inference_pb2.PredictRequest, late: FerrymanError, job: jobs_pb2.Job) -> AcceptedAsJob:
    accepted = AcceptedAsJob(
        late.code,
        f"{late.message}; but its job {job.job_id} was queued",
        Reason.ACCEPTED_AS_JOB,
        job.job_id,
        "",
    )
    accepted.request_id = request.request_id
    return accepted


def spilled_late(
    channel: grpc.Channel, request: inference_pb2.PredictRequest, late: FerrymanError, metadata: Metadata
) -> FerrymanError:
    """``late``, or AcceptedAsJob when the request's job was queued after all."""
    if not _worth_a_look(request, late):
        return late
    lookup = jobs_pb2.GetJobRequest(job_id=spill_job_id(request.request_id))
    stub = jobs_pb2_grpc.JobsStub(channel)
    for look in range(LOOKS):
        if look:
            time.sleep(LOOK_AGAIN_S)
        try:
            return _found(request, late, stub.GetJob(lookup, metadata=metadata, timeout=LOOKUP_TIMEOUT_S))
        except grpc.RpcError:
            continue
    return late


async def spilled_late_async(
    channel: grpc.aio.Channel, request: inference_pb2.PredictRequest, late: FerrymanError, metadata: Metadata
) -> FerrymanError:
    """``spilled_late`` on an asyncio channel."""
    if not _worth_a_look(request, late):
        return late
    lookup = jobs_pb2.GetJobRequest(job_id=spill_job_id(request.request_id))
    stub = jobs_pb2_grpc.JobsStub(channel)
    for look in range(LOOKS):
        if look:
            await asyncio.sleep(LOOK_AGAIN_S)
        try:
            job = await stub.GetJob(lookup, metadata=metadata, timeout=LOOKUP_TIMEOUT_S)
        except grpc.RpcError:
            continue
        return _found(request, late, job)
    return late
