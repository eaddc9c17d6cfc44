"""A small synchronous client for Batcher.Submit, for tests and benchmarks."""

from __future__ import annotations

import queue
from collections.abc import Iterator, Sequence
from datetime import timedelta

import grpc
import numpy as np

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


def submit_all(address: str, items: Sequence[batcher_pb2.SubmitItem]) -> dict[str, batcher_pb2.ItemResult]:
    """Send every item on one stream at once; return the results by request id."""
    with grpc.insecure_channel(address) as channel:
        stub = batcher_pb2_grpc.BatcherStub(channel)
        results = stub.Submit(iter(items), timeout=STREAM_TIMEOUT_S)
        return {r.request_id: r for r in results}


class OpenStream:
    """A Submit stream kept open: send items at any time, read results as they come."""

    def __init__(self, address: str) -> None:
        self._channel = grpc.insecure_channel(address)
        self._outbox: queue.Queue[batcher_pb2.SubmitItem | None] = queue.Queue()
        self._results = batcher_pb2_grpc.BatcherStub(self._channel).Submit(
            self._items(), timeout=STREAM_TIMEOUT_S
        )

    def _items(self) -> Iterator[batcher_pb2.SubmitItem]:
        while (next_item := self._outbox.get()) is not None:
            yield next_item

    def send(self, submit: batcher_pb2.SubmitItem) -> None:
        self._outbox.put(submit)

    def receive(self) -> batcher_pb2.ItemResult:
        result: batcher_pb2.ItemResult = next(self._results)
        return result

    def close(self) -> None:
        self._outbox.put(None)
        self._channel.close()
