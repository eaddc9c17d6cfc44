"""Which refusals spill into jobs, the job a request spills into, and what the caller sees."""

from __future__ import annotations

from datetime import timedelta

import grpc

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
from ferryman.sdk.errors import AcceptedAsJob, from_status
from ferryman_server.router.bounds import MAX_REQUEST_ID_CHARS
from ferryman_server.router.spill import accepted, spillable

EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED


def quota_refusal(*limits: str) -> object:
    return make_status(
        EXHAUSTED,
        "quota exceeded",
        reason=Reason.QUOTA_EXCEEDED,
        quota_violations=[(f"acme:{limit}", "6 of 5 used") for limit in limits],
        retry_after=timedelta(seconds=1),
    )


def test_load_and_rate_refusals_spill_and_nothing_else_does() -> None:
    load = (
        Reason.OVERLOADED,
        Reason.QUEUE_FULL,
        Reason.DEADLINE_UNMEETABLE,
        Reason.DEADLINE_TOO_SHORT,
        Reason.DEADLINE,
        Reason.NO_ROOM,
    )
    for reason in load:
        assert spillable(make_status(EXHAUSTED, "busy", reason=reason)), reason
    assert spillable(quota_refusal("rpm"))
    assert spillable(quota_refusal("tpm", "max_concurrency"))
    # A job would spend what the tenant may not: over its daily cost, nothing spills.
    assert not spillable(quota_refusal("cost_per_day"))
    assert not spillable(quota_refusal("rpm", "cost_per_day"))
    assert not spillable(make_status(EXHAUSTED, "quota", reason=Reason.QUOTA_EXCEEDED))
    # The caller's mistakes and the model's failures are answers, not load.
    for reason in (Reason.INVALID_INPUT, Reason.MODEL_ERROR, Reason.UNKNOWN_MODEL, Reason.REQUEST_ID_REUSED):
        assert not spillable(make_status(grpc.StatusCode.INVALID_ARGUMENT, "no", reason=reason)), reason


def test_a_request_always_spills_into_the_same_job_with_a_valid_id() -> None:
    assert spill_job_id("req-1") == spill_job_id("req-1")
    assert spill_job_id("req-1") != spill_job_id("req-2")
    longest = "r" * MAX_REQUEST_ID_CHARS
    assert 0 < len(spill_job_id(longest)) <= MAX_REQUEST_ID_CHARS
    assert spill_job_id(longest) != spill_job_id(longest[:-1] + "s")


def test_the_caller_gets_the_refusals_code_and_the_job_id() -> None:
    refusal = make_status(EXHAUSTED, "queue full", reason=Reason.QUEUE_FULL)
    status = accepted(refusal, "spill-1")
    assert status_code(status) == EXHAUSTED
    assert reason_of(status) == Reason.ACCEPTED_AS_JOB
    info = unpack_details(status)["ErrorInfo"]
    assert dict(info.metadata) == {JOB_ID: "spill-1", REFUSED_FOR: Reason.QUEUE_FULL}  # type: ignore[attr-defined]
    error = from_status(status)
    # Not a retryable error: the SDK does not send it again, the job answers it.
    assert isinstance(error, AcceptedAsJob)
    assert (error.job_id, error.refused_for, error.code) == ("spill-1", Reason.QUEUE_FULL, EXHAUSTED)
