"""A version queue's step with fake nodes and a fake clock (no sockets): while no queued
tenant may take a slot it decides nothing, yet still fails what can no longer run in time."""

from __future__ import annotations

from datetime import timedelta

import grpc
from batcher_fakes import KEY, NODES, Letters, rig

from ferryman.v1 import batcher_pb2, common_pb2
from ferryman_server.batcher.dispatcher import Dispatcher
from ferryman_server.batcher.metrics import BatcherMetrics
from ferryman_server.batcher.service import BatcherService
from ferryman_server.batcher.settings import BatcherSettings


def item(request_id: str, budget_s: float) -> batcher_pb2.SubmitItem:
    data = request_id.encode().ljust(8, b"\0")[:8]  # distinct inputs: nothing coalesces
    tensor = common_pb2.Tensor(dtype=common_pb2.DATA_TYPE_FP32, shape=[1, 2], data=data)
    submitted = batcher_pb2.SubmitItem(
        request_id=request_id,
        tenant="t",
        model="m",
        version="1",
        inputs=[common_pb2.NamedTensor(name="input", tensor=tensor)],
    )
    submitted.time_budget.FromTimedelta(timedelta(seconds=budget_s))
    return submitted


async def test_a_queue_with_no_free_slot_fails_what_cannot_run_in_time_and_never_spins() -> None:
    r = await rig()
    settings, metrics = BatcherSettings(retry_backoff_s=0), BatcherMetrics()
    service = BatcherService(
        settings,
        r.directory,
        metrics,
        lambda finish: Dispatcher(settings, r.directory, metrics, Letters(), finish, clock=r.clock),
        clock=r.clock,
    )
    for _ in NODES:  # every slot of both nodes held by another tenant's batches
        for _ in range(2):
            assert r.dispatcher.reserve(KEY, 1, "other") is not None
    assert r.directory.capacity(KEY).free_slots == 0
    results: dict[str, batcher_pb2.ItemResult] = {}

    def sink(result: batcher_pb2.ItemResult) -> None:
        results[result.request_id] = result

    service.submit(item("soon", 0.2), sink, stream=1)
    service.submit(item("later", 5.0), sink, stream=1)
    await service.close()  # the queue's own loop is stopped: its steps are taken here
    assert results == {}, "both admitted"
    (queue,) = service.queues.values()
    wait = queue._step()
    # Nothing can be dispatched and nothing is late yet: sleep until "soon" would be.
    assert wait is not None and 0 < wait <= 0.2
    r.clock.now += 0.2
    wait = queue._step()
    assert results["soon"].status.code == grpc.StatusCode.DEADLINE_EXCEEDED.value[0]
    assert [e.request_id for e in queue.entries] == ["later"]
    # Never zero (that would decide again at once, for ever, starving the event loop).
    assert wait is not None and wait > 1.0
