"""A small synchronous client for Batcher.Submit, for tests and benchmarks."""

from __future__ import annotations

import queue
from collections.abc import Iterator, Sequence
from datetime import timedelta

import numpy as np
from internal import internal_channel

from ferryman.tensors import encode
from ferryman.v1 import batcher_pb2, batcher_pb2_grpc, common_pb2

STREAM_TIMEOUT_S = 60.0


def item(
    request_id: str,
    array: np.ndarray,
    *,
    model: str = "echo",
    version: str = "1",
    tenant: str = "acme",
    budget_s: float | None = None,
    parameters: dict[str, str] | None = None,
    priority: common_pb2.Priority = common_pb2.PRIORITY_UNSPECIFIED,
) -> batcher_pb2.SubmitItem:
    submit = batcher_pb2.SubmitItem(
        request_id=request_id,
        tenant=tenant,
        model=model,
        version=version,
        parameters=parameters or {},
        priority=priority,
        inputs=[common_pb2.NamedTensor(name="input", tensor=encode(array))],
    )
    if budget_s is not None:
        submit.time_budget.FromTimedelta(timedelta(seconds=budget_s))
    return submit


def submit_all(
    address: str, items: Sequence[batcher_pb2.SubmitItem], per_message: int = 8
) -> dict[str, batcher_pb2.ItemResult]:
    """Send every item on one stream at once (``per_message`` to a message); results by request id."""
    messages = [
        batcher_pb2.SubmitRequest(items=items[i : i + per_message]) for i in range(0, len(items), per_message)
    ]
    with internal_channel(address) as channel:
        stub = batcher_pb2_grpc.BatcherStub(channel)
        responses = stub.Submit(iter(messages), timeout=STREAM_TIMEOUT_S)
        return {r.request_id: r for response in responses for r in response.results}


class OpenStream:
    """A Submit stream kept open: send items at any time, read results as they come."""

    def __init__(self, address: str) -> None:
        self._channel = internal_channel(address)
        self._outbox: queue.Queue[batcher_pb2.SubmitItem | None] = queue.Queue()
        self._pending: list[batcher_pb2.ItemResult] = []
        stub = batcher_pb2_grpc.BatcherStub(self._channel)
        self._responses = stub.Submit(self._messages(), timeout=STREAM_TIMEOUT_S)

    def _messages(self) -> Iterator[batcher_pb2.SubmitRequest]:
        while (next_item := self._outbox.get()) is not None:
            yield batcher_pb2.SubmitRequest(items=[next_item])

    def send(self, submit: batcher_pb2.SubmitItem) -> None:
        self._outbox.put(submit)

    def receive(self) -> batcher_pb2.ItemResult:
        while not self._pending:
            response: batcher_pb2.SubmitResponse = next(self._responses)
            self._pending.extend(response.results)
        return self._pending.pop(0)

    def close(self) -> None:
        self._outbox.put(None)
        self._channel.close()
