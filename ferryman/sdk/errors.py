"""Typed SDK errors from gRPC statuses and their google.rpc details."""

from __future__ import annotations

import grpc
from google.rpc import status_pb2

from ferryman.durations import seconds_of
from ferryman.errors import JOB_ID, REFUSED_FOR, Reason, reason_of, status_code, status_of, unpack_details


class FerrymanError(Exception):
    """Any failed request: the gRPC code, the server's message, its reason, and the
    request id it was sent under (set by the client; retry with it to be charged once)."""

    def __init__(self, code: grpc.StatusCode, message: str, reason: str = "") -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message
        self.reason = reason
        self.request_id = ""

    def __str__(self) -> str:
        text = f"{self.code.name}: {self.message}"
        return f"{text} (request id {self.request_id})" if self.request_id else text


class ClientClosed(FerrymanError):
    """The client was closed; make a new one."""

    def __init__(self) -> None:
        super().__init__(grpc.StatusCode.CANCELLED, "the client is closed", "CLIENT_CLOSED")


class RetryableError(FerrymanError):
    """Worth trying again, after ``retry_after`` seconds when the server said."""

    def __init__(
        self, code: grpc.StatusCode, message: str, reason: str = "", retry_after: float | None = None
    ):
        super().__init__(code, message, reason)
        self.retry_after = retry_after


class Unauthenticated(FerrymanError):
    """Missing, unknown or revoked API key."""


class PermissionDenied(FerrymanError):
    """The key's tenant may not use this model."""


class NotFound(FerrymanError):
    """Unknown model or version."""


class InvalidInput(FerrymanError):
    """Inputs do not fit the model's schema; ``violations`` lists (field, description)."""

    def __init__(self, code: grpc.StatusCode, message: str, reason: str, violations: list[tuple[str, str]]):
        super().__init__(code, message, reason)
        self.violations = violations


class InvalidOption(InvalidInput, ValueError):
    """An option the client refused before sending anything (an unknown priority name):
    ``violations`` names it. Also a ValueError, as a bad argument is."""

    def __init__(self, option: str, description: str) -> None:
        super().__init__(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"{option}: {description}",
            "INVALID_OPTION",
            [(option, description)],
        )


class RequestIdReused(FerrymanError):
    """The request id was already used for a different request (or for a generation, which
    one id buys once): send this request under a new id. Never retried."""


class AnswerNotKept(RequestIdReused):
    """The request was already answered under this id and its answer was not kept, so it is
    not run again (the client retries its own ids under a new one, charged again)."""


class QuotaExceeded(RetryableError):
    """Over a hard quota limit; ``violations`` lists (limit, description)."""

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        reason: str,
        retry_after: float | None,
        violations: list[tuple[str, str]],
    ):
        super().__init__(code, message, reason, retry_after)
        self.violations = violations


class Overloaded(RetryableError):
    """The model's queue is full or its latency exceeds the deadline; try again later."""


class AcceptedAsJob(FerrymanError):
    """Refused for load or a rate quota, and accepted as the durable job ``job_id`` instead
    (the request asked to spill): its one item's result is the answer. Not retried: a
    retry under the same request id finds the same job."""

    def __init__(self, code: grpc.StatusCode, message: str, reason: str, job_id: str, refused_for: str):
        super().__init__(code, message, reason)
        self.job_id = job_id
        self.refused_for = refused_for


class Unavailable(RetryableError):
    """No replica or service reachable right now."""


class DeadlineExceeded(FerrymanError):
    """The answer could not come within the deadline (the request was not run, or ran late)."""


class ModelError(FerrymanError):
    """The model raised on this input (it is recorded as a dead letter)."""


def from_status(status: status_pb2.Status) -> FerrymanError:
    """The typed error for a google.rpc.Status."""
    code = status_code(status)
    details = unpack_details(status)
    reason = reason_of(status)
    retry = details.get("RetryInfo")
    retry_after = seconds_of(retry.retry_delay) if retry is not None else None  # type: ignore[attr-defined]
    if reason == Reason.ACCEPTED_AS_JOB:
        info = details["ErrorInfo"]
        meta = info.metadata  # type: ignore[attr-defined]
        return AcceptedAsJob(code, status.message, reason, meta.get(JOB_ID, ""), meta.get(REFUSED_FOR, ""))
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return Unauthenticated(code, status.message, reason)
    if code == grpc.StatusCode.PERMISSION_DENIED:
        return PermissionDenied(code, status.message, reason)
    if code == grpc.StatusCode.NOT_FOUND:
        return NotFound(code, status.message, reason)
    if code == grpc.StatusCode.ALREADY_EXISTS and reason == Reason.ANSWER_NOT_KEPT:
        return AnswerNotKept(code, status.message, reason)
    if code == grpc.StatusCode.ALREADY_EXISTS and reason == Reason.REQUEST_ID_REUSED:
        return RequestIdReused(code, status.message, reason)
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        bad = details.get("BadRequest")
        violations = [(v.field, v.description) for v in getattr(bad, "field_violations", [])]
        return InvalidInput(code, status.message, reason, violations)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        quota = details.get("QuotaFailure")
        if quota is not None:
            violations = [(v.subject, v.description) for v in quota.violations]  # type: ignore[attr-defined]
            return QuotaExceeded(code, status.message, reason, retry_after, violations)
        return Overloaded(code, status.message, reason, retry_after)
    if code == grpc.StatusCode.UNAVAILABLE:
        return Unavailable(code, status.message, reason, retry_after)
    if code == grpc.StatusCode.CANCELLED:
        # The SDK never cancels a call itself but on close (ClientClosed) or at its deadline
        # (DEADLINE_EXCEEDED): a CANCELLED status is the server's, a router stopping with the
        # call in flight. Retried under the same request id, it is not charged twice.
        return Unavailable(code, status.message, reason or "SERVER_CANCELLED", retry_after)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return DeadlineExceeded(code, status.message, reason)
    if code == grpc.StatusCode.INTERNAL and reason == Reason.MODEL_ERROR:
        return ModelError(code, status.message, reason)
    return FerrymanError(code, status.message, reason)


def from_rpc_error(error: grpc.RpcError) -> FerrymanError:
    """The typed error for a failed call (details from grpc-status-details-bin)."""
    return from_status(status_of(error))
