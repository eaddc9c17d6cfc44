"""A version that failed on its node is refused with where and why, not "no ready replica":
the tenant reads "m:1 failed on n1: warm-up at batch 2 failed: ..." (from the nodes'
heartbeats, through the registry)."""

from __future__ import annotations

from batcher_fakes import Registry, real_time_batcher

from ferryman.v1 import batcher_pb2, common_pb2
from ferryman_server.batcher.settings import BatcherSettings
from ferryman_server.registry.snapshot import NodeVersions

REASON = "warm-up at batch 2 failed: RuntimeError: Guard failed: input.size()[0] == 1"


class FailedEverywhere(Registry):
    def node_versions(self, heartbeat_timeout_s: float) -> NodeVersions:
        return NodeVersions(ready={}, failed={"m:1": [("n1", REASON), ("n2", REASON)]})


async def test_the_refusal_says_where_and_why_the_version_failed() -> None:
    _, service = await real_time_batcher(BatcherSettings(), FailedEverywhere())
    tensor = common_pb2.Tensor(dtype=common_pb2.DATA_TYPE_FP32, shape=[1, 2], data=bytes(8))
    item = batcher_pb2.SubmitItem(
        request_id="r",
        tenant="t",
        model="m",
        version="1",
        inputs=[common_pb2.NamedTensor(name="input", tensor=tensor)],
    )
    item.time_budget.FromSeconds(5)
    results: list[batcher_pb2.ItemResult] = []
    service.submit(item, results.append, stream=1)
    await service.close()
    (result,) = results
    assert result.status.message == f"m:1 failed on n1 (and on 1 more): {REASON}"
