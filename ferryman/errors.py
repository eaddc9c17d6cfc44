"""gRPC errors with ``google.rpc`` details, shared by every service and the SDK.

Whole-RPC errors are raised with ``abort``; per-item errors inside streams and
batches travel as ``google.rpc.Status`` messages built by the same helpers, so a
client sees the same code and details either way.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from datetime import timedelta
from enum import StrEnum
from typing import Any

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

ERROR_DOMAIN = "ferryman.dev"


SERVER_FAULTS = frozenset(
    {
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }
)
"""Codes that are the server's own fault, never what the caller did (a bad input, an unknown
model, a quota refusal): spans are marked ERROR, SLOs and canary analysis count them. The
shipped dashboards and alert rules count the same set (as all codes but the caller's)."""


NO_CAPACITY = frozenset(
    code.value[0]
    for code in (
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.CANCELLED,
    )
)
"""Numeric codes of an item result that says nothing about the item itself: it found no
capacity or no replica in time (background work, shadows and job items, tries again later
or is skipped instead of counting it as the model's failure)."""


class Reason(StrEnum):
    """Every ErrorInfo reason Ferryman puts on the wire (clients may branch on these)."""

    UNAUTHENTICATED = "UNAUTHENTICATED"
    """Missing, unknown or revoked API key."""
    UNDECODABLE = "UNDECODABLE"
    """The request message could not be parsed."""
    INVALID_REQUEST = "INVALID_REQUEST"
    """A request field is out of bounds (ids, names, parameters)."""
    INVALID_INPUT = "INVALID_INPUT"
    """Inputs do not fit the version's schema (BadRequest lists each violation)."""
    UNKNOWN_MODEL = "UNKNOWN_MODEL"
    """No such model, or one this tenant may not see (the two answer alike)."""
    UNKNOWN_VERSION = "UNKNOWN_VERSION"
    QUOTA_EXCEEDED = "QUOTA_EXCEEDED"
    """Over a hard limit (QuotaFailure + RetryInfo)."""
    QUOTA_UNAVAILABLE = "QUOTA_UNAVAILABLE"
    """The quota backend could not be reached and fails closed."""
    REQUEST_ID_REUSED = "REQUEST_ID_REUSED"
    """A different request under a request id already used."""
    ANSWER_NOT_KEPT = "ANSWER_NOT_KEPT"
    """A repeat of a request already answered whose answer was not kept (its id was a client
    library's own, the answer too large or past the tenant's kept-answer bound, or a
    generation's): not run again; send it under a new id to run it again."""
    OVERLOADED = "OVERLOADED"
    """Refused by predicted latency: the item could not make its deadline."""
    QUEUE_FULL = "QUEUE_FULL"
    TOO_MANY_PARAMETER_SETS = "TOO_MANY_PARAMETER_SETS"
    DEADLINE = "DEADLINE"
    """The deadline passed (before arrival, or before an answer came)."""
    CANCELLED = "CANCELLED"
    """The caller went away (an HTTP client that hung up) before its answer."""
    DEADLINE_UNMEETABLE = "DEADLINE_UNMEETABLE"
    """Failed in the queue, before running: no batch could finish in time (load: it waited)."""
    DEADLINE_TOO_SHORT = "DEADLINE_TOO_SHORT"
    """The version needs longer than this request's deadline even when idle: no retry helps,
    only a longer deadline (the request's own fault, no sign of load)."""
    DRAINING = "DRAINING"
    NO_REPLICA = "NO_REPLICA"
    NO_ROOM = "NO_ROOM"
    """No node has the memory for the version, even after evicting the idle ones."""
    NO_BATCHER = "NO_BATCHER"
    MODEL_ERROR = "MODEL_ERROR"
    """The model raised on this input (isolated by bisection, recorded as a dead letter)."""
    BATCHER_ERROR = "BATCHER_ERROR"
    INTERNAL = "INTERNAL"
    UNKNOWN_REQUEST = "UNKNOWN_REQUEST"
    """Feedback names no answered request of this tenant within the window."""
    FEEDBACK_RECORDED = "FEEDBACK_RECORDED"
    """This metric was already reported for the request, or the request has all the
    metrics it may have."""
    ACCEPTED_AS_JOB = "ACCEPTED_AS_JOB"
    """Refused for load or a rate quota, and accepted as a durable job instead (spill):
    ErrorInfo metadata ``job_id`` names it, ``refused_for`` the refusal's own reason."""


class CallFailed(Exception):
    """A call between services (or through a port) ended with ``status``: its code,
    message and google.rpc details, as the caller's caller should see them."""

    def __init__(self, status: status_pb2.Status) -> None:
        super().__init__(status.message)
        self.status = status


JOB_ID = "job_id"
"""ErrorInfo metadata of an ACCEPTED_AS_JOB answer: the job that will answer the request."""
REFUSED_FOR = "refused_for"
"""ErrorInfo metadata of an ACCEPTED_AS_JOB answer: the reason the request was refused."""
SPILL_JOB_PREFIX = "spill-"


def spill_job_id(request_id: str) -> str:
    """The job a request spills into, the same for every try of it (so a retry finds the
    job, and a client that gave up waiting can look it up). Hashed: any request id makes a
    valid job id; the job's one item carries the request id as its ``custom_id``."""
    return SPILL_JOB_PREFIX + hashlib.sha256(request_id.encode()).hexdigest()[:32]


EXPECTED_MS = "expected_ms"
"""ErrorInfo metadata of an OVERLOADED refusal: the latency a new item was predicted to have."""


def make_status(
    code: grpc.StatusCode,
    message: str,
    *,
    reason: str = "",
    metadata: Mapping[str, str] | None = None,
    violations: Iterable[tuple[str, str]] = (),
    quota_violations: Iterable[tuple[str, str]] = (),
    retry_after: timedelta | None = None,
) -> status_pb2.Status:
    """A google.rpc.Status with ErrorInfo, BadRequest, QuotaFailure and RetryInfo as given."""
    details: list[any_pb2.Any] = []

    def attach(message_: object) -> None:
        packed = any_pb2.Any()
        packed.Pack(message_)  # type: ignore[arg-type]
        details.append(packed)

    if reason:
        attach(error_details_pb2.ErrorInfo(reason=reason, domain=ERROR_DOMAIN, metadata=dict(metadata or {})))
    field_violations = [
        error_details_pb2.BadRequest.FieldViolation(field=field, description=description)
        for field, description in violations
    ]
    if field_violations:
        attach(error_details_pb2.BadRequest(field_violations=field_violations))
    quota = [
        error_details_pb2.QuotaFailure.Violation(subject=subject, description=description)
        for subject, description in quota_violations
    ]
    if quota:
        attach(error_details_pb2.QuotaFailure(violations=quota))
    if retry_after is not None:
        delay = duration_pb2.Duration()
        delay.FromTimedelta(retry_after)
        attach(error_details_pb2.RetryInfo(retry_delay=delay))
    return status_pb2.Status(code=code.value[0], message=message, details=details)


def ok_status() -> status_pb2.Status:
    return status_pb2.Status(code=code_pb2.OK)


def status_code(status: status_pb2.Status) -> grpc.StatusCode:
    """The grpc.StatusCode of a google.rpc.Status."""
    for code in grpc.StatusCode:
        if code.value[0] == status.code:
            return code
    return grpc.StatusCode.UNKNOWN


async def abort(context: grpc.aio.ServicerContext[Any, Any], status: status_pb2.Status) -> None:
    """End an RPC with ``status``: its code, message and details (as grpc-status-details-bin)."""
    rpc = rpc_status.to_status(status)
    await context.abort(rpc.code, rpc.details, rpc.trailing_metadata)


def status_of(error: grpc.RpcError) -> status_pb2.Status:
    """The google.rpc.Status a failed call ended with (details from grpc-status-details-bin)."""
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    if status is None:
        code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
        details = error.details() if hasattr(error, "details") else str(error)
        status = status_pb2.Status(code=code.value[0], message=details or "")
    return status


def unpack_details(status: status_pb2.Status) -> dict[str, object]:
    """The known detail messages of a status by type name (ErrorInfo, BadRequest, ...)."""
    found: dict[str, object] = {}
    for detail in status.details:
        for kind in (
            error_details_pb2.ErrorInfo,
            error_details_pb2.BadRequest,
            error_details_pb2.QuotaFailure,
            error_details_pb2.RetryInfo,
        ):
            if detail.Is(kind.DESCRIPTOR):
                message = kind()
                detail.Unpack(message)
                found[kind.DESCRIPTOR.name] = message
    return found


def reason_of(status: status_pb2.Status) -> str:
    """The ErrorInfo reason of a status ("" when it carries none)."""
    info = unpack_details(status).get("ErrorInfo")
    return info.reason if isinstance(info, error_details_pb2.ErrorInfo) else ""


def expected_wait_s(status: status_pb2.Status) -> float | None:
    """The predicted latency an OVERLOADED refusal carries, in seconds; None for anything else."""
    info = unpack_details(status).get("ErrorInfo")
    if not isinstance(info, error_details_pb2.ErrorInfo) or info.reason != Reason.OVERLOADED:
        return None
    try:
        return float(info.metadata[EXPECTED_MS]) / 1000
    except (KeyError, ValueError):
        return None
