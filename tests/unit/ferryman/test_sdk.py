"""SDK pieces without sockets: typed errors from statuses, retry decisions, input conversion."""

from __future__ import annotations

from datetime import timedelta

import grpc
import numpy as np
import pytest
import torch

from ferryman.errors import make_status
from ferryman.sdk import errors
from ferryman.sdk.calls import (
    DEFAULT_RETRIES,
    call_metadata,
    call_timeout,
    endpoint,
    priority_level,
    retry_delay,
)
from ferryman.sdk.convert import from_outputs, to_inputs
from ferryman.tensors import decode
from ferryman.v1 import common_pb2, inference_pb2


def test_statuses_become_typed_errors() -> None:
    quota = errors.from_status(
        make_status(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "over",
            reason="QUOTA_EXCEEDED",
            quota_violations=[("acme:rpm", "5 of 5 used")],
            retry_after=timedelta(seconds=12),
        )
    )
    assert isinstance(quota, errors.QuotaExceeded) and quota.retry_after == 12
    assert quota.violations == [("acme:rpm", "5 of 5 used")]
    overloaded = errors.from_status(
        make_status(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "busy",
            reason="OVERLOADED",
            retry_after=timedelta(seconds=0.2),
        )
    )
    assert isinstance(overloaded, errors.Overloaded) and overloaded.retry_after == pytest.approx(0.2)
    invalid = errors.from_status(
        make_status(
            grpc.StatusCode.INVALID_ARGUMENT,
            "bad",
            reason="INVALID_INPUT",
            violations=[("inputs.x", "missing")],
        )
    )
    assert isinstance(invalid, errors.InvalidInput) and invalid.violations == [("inputs.x", "missing")]
    reused = errors.from_status(
        make_status(
            grpc.StatusCode.ALREADY_EXISTS, "request_id 'r1' was already used", reason="REQUEST_ID_REUSED"
        )
    )
    assert isinstance(reused, errors.RequestIdReused) and not isinstance(reused, errors.RetryableError)
    other = errors.from_status(
        make_status(grpc.StatusCode.ALREADY_EXISTS, "a second vote", reason="FEEDBACK_GIVEN")
    )
    assert type(other) is errors.FerrymanError
    model = errors.from_status(make_status(grpc.StatusCode.INTERNAL, "boom", reason="MODEL_ERROR"))
    assert isinstance(model, errors.ModelError) and model.reason == "MODEL_ERROR"
    for code, kind in [
        (grpc.StatusCode.UNAUTHENTICATED, errors.Unauthenticated),
        (grpc.StatusCode.PERMISSION_DENIED, errors.PermissionDenied),
        (grpc.StatusCode.NOT_FOUND, errors.NotFound),
        (grpc.StatusCode.UNAVAILABLE, errors.Unavailable),
        # A router stopping cancels what it still holds: seen in CI across a restart.
        (grpc.StatusCode.CANCELLED, errors.Unavailable),
        (grpc.StatusCode.DEADLINE_EXCEEDED, errors.DeadlineExceeded),
    ]:
        assert isinstance(errors.from_status(make_status(code, "x")), kind)


def test_retries_unavailable_and_overload_but_never_quota_or_input() -> None:
    unavailable = errors.Unavailable(grpc.StatusCode.UNAVAILABLE, "down")
    # Jittered: 50-100% of the doubling step, so clients refused together spread out.
    first = [retry_delay(unavailable, 0) for _ in range(50)]
    assert all(d is not None and 0.05 <= d <= 0.1 for d in first) and len(set(first)) > 1
    third = retry_delay(unavailable, 2)
    assert third is not None and 0.2 <= third <= 0.4
    late = retry_delay(unavailable, 20)
    assert late is not None and 2.0 <= late <= 4.0, "the step is capped"
    # The schedule spans seconds, not a blink: a router restart is ridden out.
    assert sum(min(4.0, 0.1 * 2**a) for a in range(DEFAULT_RETRIES)) * 0.5 > 6.0
    told = errors.Overloaded(grpc.StatusCode.RESOURCE_EXHAUSTED, "busy", retry_after=1.5)
    assert retry_delay(told, 0) == 1.5
    quota = errors.QuotaExceeded(grpc.StatusCode.RESOURCE_EXHAUSTED, "over", "QUOTA_EXCEEDED", 3.0, [])
    assert retry_delay(quota, 0) is None
    assert retry_delay(errors.InvalidInput(grpc.StatusCode.INVALID_ARGUMENT, "x", "", []), 0) is None


def model_info() -> inference_pb2.ModelInfo:
    spec = common_pb2.TensorSpec(name="input", dtype=common_pb2.DATA_TYPE_FP32, shape=[4])
    schema = common_pb2.IOSchema(inputs=[spec])
    return inference_pb2.ModelInfo(name="m", versions=[inference_pb2.VersionInfo(version="1", schema=schema)])


def test_inputs_from_numpy_torch_lists_and_text() -> None:
    info = model_info()
    (from_list,) = to_inputs([1, 2, 3, 4], info)  # one item without its item dimension, ints -> FP32
    assert from_list.tensor.dtype == common_pb2.DATA_TYPE_FP32 and list(from_list.tensor.shape) == [1, 4]
    (from_torch,) = to_inputs(torch.ones(2, 4, dtype=torch.float64), info)
    np.testing.assert_array_equal(decode(from_torch.tensor), np.ones((2, 4), np.float32))
    (text,) = to_inputs({"t": ["a", "b"]}, None)
    assert list(text.text.values) == ["a", "b"]
    with pytest.raises(ValueError, match="mapping"):
        to_inputs([1, 2], None)
    outputs = from_outputs([common_pb2.NamedTensor(name="t", text=common_pb2.TextList(values=["x"]))])
    assert outputs == {"t": ["x"]}


def test_priorities_by_name_or_number_and_unknown_ones_refused() -> None:
    assert priority_level("high") == common_pb2.PRIORITY_HIGH
    assert priority_level("LOW") == common_pb2.PRIORITY_LOW
    assert priority_level(None) == 0
    assert priority_level(common_pb2.PRIORITY_NORMAL) == common_pb2.PRIORITY_NORMAL
    with pytest.raises(errors.InvalidOption, match="unknown priority 'urgent'") as named:
        priority_level("urgent")
    assert isinstance(named.value, errors.InvalidInput) and isinstance(named.value, ValueError)
    assert named.value.violations[0][0] == "priority" and "low, normal, high" in named.value.message
    with pytest.raises(errors.InvalidOption):
        priority_level(99)
    with pytest.raises(errors.InvalidOption) as long:
        priority_level("x" * 10_000)
    assert len(str(long.value)) < 200, "a huge name is not echoed whole"


def test_target_and_key_come_from_the_environment_like_the_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FERRYMAN_API_KEY", raising=False)
    monkeypatch.delenv("FERRYMAN_TARGET", raising=False)
    with pytest.raises(ValueError, match="FERRYMAN_API_KEY"):
        endpoint(None, None)
    assert endpoint(None, "k") == ("127.0.0.1:7001", "k")
    monkeypatch.setenv("FERRYMAN_API_KEY", "env-key")
    monkeypatch.setenv("FERRYMAN_TARGET", "router:7001")
    assert endpoint(None, None) == ("router:7001", "env-key")
    assert endpoint("other:1", "given") == ("other:1", "given")


def test_call_metadata_cannot_replace_the_key() -> None:
    base = (("authorization", "Bearer fm_real"),)
    extra = [("Authorization", "Bearer fm_forged"), ("traceparent", "00-abc-def-01")]
    assert call_metadata(base, extra) == [
        ("authorization", "Bearer fm_real"),
        ("traceparent", "00-abc-def-01"),
    ]
    assert call_metadata(base, None) == list(base)


def test_call_timeout_zero_means_now_and_negative_is_refused() -> None:
    assert call_timeout(None, 30.0) == 30.0
    assert call_timeout(0, 30.0) == 0
    with pytest.raises(ValueError):
        call_timeout(-1, 30.0)
