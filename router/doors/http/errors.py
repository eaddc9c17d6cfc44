"""Failures of the HTTP doors: the HTTP status a gRPC code maps to, ``Retry-After`` from
RetryInfo, and the body in each API's own shape (OIP's ``{"error": "..."}``, OpenAI's
``{"error": {"message", "type", "param", "code"}}``), with Ferryman's reason and field
violations beside them."""

from __future__ import annotations

import math
from typing import Any

import grpc
from google.rpc import error_details_pb2, status_pb2

from ferryman.durations import seconds_of
from ferryman.errors import status_code, unpack_details

HTTP_STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}
"""gRPC code -> HTTP status (google.api's mapping); anything else is 500."""

OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    429: "rate_limit_error",
}
"""OpenAI's error ``type`` by status; the rest are ``api_error``."""


def http_status(status: status_pb2.Status) -> int:
    return HTTP_STATUS.get(status_code(status), 500)


def retry_after_s(status: status_pb2.Status) -> int | None:
    """Whole seconds to wait (at least 1) when the status carries RetryInfo."""
    info = unpack_details(status).get("RetryInfo")
    if not isinstance(info, error_details_pb2.RetryInfo):
        return None
    seconds: float = seconds_of(info.retry_delay)
    return max(1, math.ceil(seconds))


def reason(status: status_pb2.Status) -> str:
    info = unpack_details(status).get("ErrorInfo")
    return info.reason if isinstance(info, error_details_pb2.ErrorInfo) else ""


def violations(status: status_pb2.Status) -> list[dict[str, str]]:
    bad = unpack_details(status).get("BadRequest")
    if not isinstance(bad, error_details_pb2.BadRequest):
        return []
    return [{"field": v.field, "description": v.description} for v in bad.field_violations]


def headers(status: status_pb2.Status) -> dict[str, str]:
    wait = retry_after_s(status)
    return {"Retry-After": str(wait)} if wait is not None else {}


def oip_body(status: status_pb2.Status) -> dict[str, Any]:
    body: dict[str, Any] = {"error": status.message, "reason": reason(status)}
    if found := violations(status):
        body["violations"] = found
    return body


def openai_body(status: status_pb2.Status) -> dict[str, Any]:
    found = violations(status)
    return {
        "error": {
            "message": status.message,
            "type": OPENAI_TYPES.get(http_status(status), "api_error"),
            "param": found[0]["field"] if found else None,
            "code": reason(status).lower() or None,
        }
    }
