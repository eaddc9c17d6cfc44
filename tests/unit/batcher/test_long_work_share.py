"""A tenant whose handler runs for a second cannot make another tenant's short calls wait it
out: its batches never take a node's last free slot, so a light tenant that calls now and
then (never "active" in between) is answered within a deadline shorter than one heavy
batch. Fake nodes (no sockets) with a time per batch by model, the real event loop."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta

from batcher_fakes import FakeNode, real_time_batcher

from ferryman.durations import set_seconds
from ferryman.v1 import batcher_pb2, common_pb2, node_pb2
from ferryman_server.batcher.settings import BatcherSettings
from ferryman_server.registry.snapshot import NodeVersions
from ferryman_server.registry.tables import ModelVersion

SECONDS = {"slow": 1.0, "fast": 0.01}
"""What one batch of each model takes on the node."""
HEAVY_OUTSTANDING = 4
LIGHT_CALLS = 12
LIGHT_GAP_S = 0.3
LIGHT_DEADLINE_S = 0.5
"""Half of one heavy batch: waiting one out misses it."""
ACTIVE_S = 0.05
"""The light tenant is never "active" between its calls (the kept-slot rule cannot help)."""


@dataclass
class TimedNode(FakeNode):
    """Two batch slots, like a GPU node (a tenant may use both); each model its own time."""

    async def infer_batch(
        self, request: node_pb2.InferBatchRequest, timeout_s: float
    ) -> node_pb2.InferBatchResponse:
        seconds = SECONDS[request.model]
        await asyncio.sleep(seconds)
        response = await super().infer_batch(request, timeout_s)
        set_seconds(response.compute, seconds)
        return response


class TwoModels:
    def revision(self) -> int:
        return 1

    def all_versions(self) -> list[tuple[str, ModelVersion]]:
        # One row a batch: the heavy tenant's waiting items fill every slot, one batch each.
        return [
            (
                model,
                ModelVersion(
                    model_id=i, version="1", artifact_uri="", sha256="", format="python", max_batch_size=1
                ),
            )
            for i, model in enumerate(SECONDS, start=1)
        ]

    def node_versions(self, heartbeat_timeout_s: float) -> NodeVersions:
        return NodeVersions(ready={f"{model}:1": [("n1", "n1:1")] for model in SECONDS}, failed={})


def item(tenant: str, model: str, n: int, budget_s: float) -> batcher_pb2.SubmitItem:
    data = f"{tenant}{n}".encode().ljust(8, b"\0")[:8]
    tensor = common_pb2.Tensor(dtype=common_pb2.DATA_TYPE_FP32, shape=[1, 2], data=data)
    submitted = batcher_pb2.SubmitItem(
        request_id=f"{tenant}/{n}",
        tenant=tenant,
        model=model,
        version="1",
        inputs=[common_pb2.NamedTensor(name="input", tensor=tensor)],
    )
    submitted.time_budget.FromTimedelta(timedelta(seconds=budget_s))
    return submitted


async def light_goodput(long_batch_s: float | None) -> float:
    """The light tenant's share of calls answered in time beside the heavy one."""
    settings = BatcherSettings(retry_backoff_s=0, fair_active_s=ACTIVE_S, long_batch_s=long_batch_s)
    _, service = await real_time_batcher(settings, TwoModels(), {"n1": TimedNode("n1", capacity=2)})
    outcomes: Counter[str] = Counter()
    heavy_sent = 0
    stop = False

    def heavy(result: batcher_pb2.ItemResult | None = None) -> None:
        nonlocal heavy_sent
        if result is not None:
            assert result.status.code == 0, result.status
        if stop:
            return
        heavy_sent += 1
        service.submit(item("heavy", "slow", heavy_sent, 60.0), heavy, stream=1)

    for _ in range(HEAVY_OUTSTANDING):
        heavy()
    await asyncio.sleep(2.5 * SECONDS["slow"])  # the node's times are learnt
    answers: list[asyncio.Future[batcher_pb2.ItemResult]] = []
    loop = asyncio.get_running_loop()
    for n in range(LIGHT_CALLS):
        answer: asyncio.Future[batcher_pb2.ItemResult] = loop.create_future()
        answers.append(answer)
        service.submit(item("light", "fast", n, LIGHT_DEADLINE_S), answer.set_result, stream=2)
        await asyncio.sleep(LIGHT_GAP_S)
    for answer in answers:
        outcomes["ok" if (await answer).status.code == 0 else "late"] += 1
    stop = True
    await service.close()
    return outcomes["ok"] / LIGHT_CALLS


async def test_a_light_tenant_is_answered_beside_a_heavy_handler() -> None:
    kept = await light_goodput(long_batch_s=BatcherSettings().long_batch_s)
    unkept = await light_goodput(long_batch_s=None)
    print(f"FIGURES light goodput beside 1 s batches: {kept:.2f} kept slot, {unkept:.2f} without")
    assert kept == 1.0, kept
