"""A request that may spill into a job (``spill_to_job``) and got no answer in time: the
router may have queued its job all the same, its answer too late for the call. One short
lookup of the job the request names (``ferryman.errors.spill_job_id``) tells the caller,
so no accepted request looks lost; not found, the call's own timeout error stands (a retry
under the same request id would find a job queued since)."""

from __future__ import annotations

import grpc

from ferryman.errors import Reason, spill_job_id
from ferryman.sdk.errors import AcceptedAsJob, DeadlineExceeded, FerrymanError
from ferryman.v1 import inference_pb2, jobs_pb2, jobs_pb2_grpc

LOOKUP_TIMEOUT_S = 1.0
"""How long past the call's timeout the lookup may take."""
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
    try:
        job = jobs_pb2_grpc.JobsStub(channel).GetJob(lookup, metadata=metadata, timeout=LOOKUP_TIMEOUT_S)
    except grpc.RpcError:
        return late
    return _found(request, late, job)


async def spilled_late_async(
    channel: grpc.aio.Channel, request: inference_pb2.PredictRequest, late: FerrymanError, metadata: Metadata
) -> FerrymanError:
    """``spilled_late`` on an asyncio channel."""
    if not _worth_a_look(request, late):
        return late
    lookup = jobs_pb2.GetJobRequest(job_id=spill_job_id(request.request_id))
    try:
        job = await jobs_pb2_grpc.JobsStub(channel).GetJob(
            lookup, metadata=metadata, timeout=LOOKUP_TIMEOUT_S
        )
    except grpc.RpcError:
        return late
    return _found(request, late, job)
