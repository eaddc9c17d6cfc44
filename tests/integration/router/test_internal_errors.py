"""A failure that is ours reaches a tenant as INTERNAL with a correlation id, never as the
exception's text (which can name paths, addresses or another tenant's data; grpc's own answer
would be UNKNOWN with it), and the id is in the log line that holds the exception: unary
calls, a stream's item, and the batcher's answer for a batch it failed on."""

from __future__ import annotations

import logging
import re
from typing import Any

import grpc
import numpy as np
import pytest
from router_platform import E2E

from ferryman.tensors import encode
from ferryman.v1 import common_pb2, inference_pb2, inference_pb2_grpc
from ferryman_server.batcher.dispatcher import Dispatcher
from ferryman_server.router.gateway import Gateway

pytestmark = pytest.mark.abuse

SECRET = "/srv/tenant-b/weights.pt at 10.1.2.3"
CORRELATION = re.compile(r"internal error \(correlation id ([0-9a-f]{16})\)")


def request(request_id: str) -> inference_pb2.PredictRequest:
    x = np.zeros((1, 512), np.float32)
    return inference_pb2.PredictRequest(
        request_id=request_id, model="mlp", inputs=[common_pb2.NamedTensor(name="input", tensor=encode(x))]
    )


def logged(caplog: pytest.LogCaptureFixture, correlation: str) -> list[logging.LogRecord]:
    """The records naming ``correlation`` that carry the exception."""
    return [r for r in caplog.records if correlation in r.getMessage() and r.exc_info is not None]


def test_a_bug_in_the_router_is_internal_with_a_correlation_id(
    e2e: E2E, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(SECRET)

    monkeypatch.setattr(Gateway, "_predict", broken)
    metadata = (("authorization", f"Bearer {e2e.keys['acme']}"),)
    stub = inference_pb2_grpc.InferenceStub(grpc.insecure_channel(e2e.router))
    with pytest.raises(grpc.RpcError) as unary:
        stub.Predict(request("unary"), metadata=metadata, timeout=30)
    assert unary.value.code() == grpc.StatusCode.INTERNAL
    assert "tenant-b" not in (unary.value.details() or "")
    found = CORRELATION.fullmatch(unary.value.details() or "")
    assert found and logged(caplog, found.group(1))
    answers = list(stub.PredictStream(iter([request("streamed")]), metadata=metadata, timeout=30))
    assert len(answers) == 1 and answers[0].error.code == grpc.StatusCode.INTERNAL.value[0]
    assert "tenant-b" not in answers[0].error.message
    found = CORRELATION.fullmatch(answers[0].error.message)
    assert found and logged(caplog, found.group(1))


def test_a_bug_in_the_batcher_is_internal_with_a_correlation_id(
    e2e: E2E, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError(SECRET)

    # After the node answered (its slot given back): a bug settling the batch's answers.
    monkeypatch.setattr(Dispatcher, "_settle", broken)
    metadata = (("authorization", f"Bearer {e2e.keys['acme']}"),)
    stub = inference_pb2_grpc.InferenceStub(grpc.insecure_channel(e2e.router))
    with pytest.raises(grpc.RpcError) as failed:
        stub.Predict(request("batched"), metadata=metadata, timeout=30)
    assert failed.value.code() == grpc.StatusCode.INTERNAL
    assert "tenant-b" not in (failed.value.details() or "")
    found = CORRELATION.search(failed.value.details() or "")
    assert found and logged(caplog, found.group(1))
