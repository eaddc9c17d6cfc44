"""gRPC statuses -> HTTP: status codes, Retry-After and each API's error body (no sockets)."""

from __future__ import annotations

from datetime import timedelta

import grpc
import pytest

from ferryman.errors import Reason, make_status
from ferryman_server.router.doors.http.errors import headers, http_status, oip_body, openai_body


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (grpc.StatusCode.INVALID_ARGUMENT, 400),
        (grpc.StatusCode.UNAUTHENTICATED, 401),
        (grpc.StatusCode.PERMISSION_DENIED, 403),
        (grpc.StatusCode.NOT_FOUND, 404),
        (grpc.StatusCode.ALREADY_EXISTS, 409),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, 429),
        (grpc.StatusCode.UNAVAILABLE, 503),
        (grpc.StatusCode.DEADLINE_EXCEEDED, 504),
        (grpc.StatusCode.INTERNAL, 500),
        (grpc.StatusCode.DATA_LOSS, 500),
    ],
)
def test_status_codes_map_from_grpc(code: grpc.StatusCode, status: int) -> None:
    assert http_status(make_status(code, "x")) == status


def test_retry_after_is_whole_seconds_and_at_least_one() -> None:
    quota = make_status(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "over",
        reason=Reason.QUOTA_EXCEEDED,
        retry_after=timedelta(seconds=2.2),
    )
    assert headers(quota) == {"Retry-After": "3"}
    short = make_status(grpc.StatusCode.RESOURCE_EXHAUSTED, "over", retry_after=timedelta(milliseconds=5))
    assert headers(short) == {"Retry-After": "1"}
    assert headers(make_status(grpc.StatusCode.NOT_FOUND, "gone")) == {}


def test_bodies_in_each_apis_shape() -> None:
    bad = make_status(
        grpc.StatusCode.INVALID_ARGUMENT,
        "inputs.input: wrong shape",
        reason=Reason.INVALID_INPUT,
        violations=[("inputs.input", "wrong shape")],
    )
    assert oip_body(bad) == {
        "error": "inputs.input: wrong shape",
        "reason": "INVALID_INPUT",
        "violations": [{"field": "inputs.input", "description": "wrong shape"}],
    }
    assert openai_body(bad) == {
        "error": {
            "message": "inputs.input: wrong shape",
            "type": "invalid_request_error",
            "param": "inputs.input",
            "code": "invalid_input",
        }
    }
    limited = make_status(grpc.StatusCode.RESOURCE_EXHAUSTED, "slow down", reason=Reason.QUOTA_EXCEEDED)
    assert openai_body(limited)["error"]["type"] == "rate_limit_error"
    assert openai_body(make_status(grpc.StatusCode.INTERNAL, "boom"))["error"]["type"] == "api_error"
