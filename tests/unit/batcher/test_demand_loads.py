"""Loads on demand in the batcher, over fake nodes: a version no node serves is loaded where
there is room and its requests are answered; one load however many requests wait; a load
that cannot happen answers its requests with why, once, not one attempt per request."""

from __future__ import annotations

import asyncio

import grpc
from batcher_fakes import FakeNode, Registry, real_time_batcher
from google.protobuf import any_pb2
from google.rpc import error_details_pb2

from ferryman.errors import Reason
from ferryman.v1 import batcher_pb2, common_pb2, node_pb2
from ferryman_server.batcher.settings import BatcherSettings
from ferryman_server.registry.snapshot import NodeVersions
from ferryman_server.registry.tables import ModelVersion

COLD = "cold:1"
MIB = 1 << 20
SCHEMA = {
    "inputs": [{"name": "input", "dtype": "FP32", "shape": [-1, 2]}],
    "outputs": [{"name": "output", "dtype": "FP32", "shape": [-1, 2]}],
}
NO_ROOM = node_pb2.LoadModelResponse(state=node_pb2.VERSION_STATE_FAILED, reason="no room", no_room=True)


class ColdVersion(Registry):
    """Two live nodes serving ``m:1``; ``cold:1`` is registered and placed nowhere."""

    def all_versions(self) -> list[tuple[str, ModelVersion]]:
        cold = ModelVersion(
            model_id=2, version="1", artifact_uri="/a", sha256="", format="python", io_schema=SCHEMA
        )
        return [*super().all_versions(), ("cold", cold)]

    def node_versions(self, heartbeat_timeout_s: float) -> NodeVersions:
        ready = super().node_versions(heartbeat_timeout_s).ready
        return NodeVersions(ready=ready, failed={}, nodes={"n1": "n1:1", "n2": "n2:1"})


def item(index: int) -> batcher_pb2.SubmitItem:
    """Distinct inputs: nothing coalesces."""
    data = index.to_bytes(4, "little") + bytes(4)
    tensor = common_pb2.Tensor(dtype=common_pb2.DATA_TYPE_FP32, shape=[1, 2], data=data)
    submitted = batcher_pb2.SubmitItem(
        request_id=f"r{index}",
        tenant="t",
        model="cold",
        version="1",
        inputs=[common_pb2.NamedTensor(name="input", tensor=tensor)],
    )
    submitted.time_budget.FromSeconds(5)
    return submitted


async def submit_all(
    nodes: dict[str, FakeNode], count: int, **settings: object
) -> list[batcher_pb2.ItemResult]:
    _, service = await real_time_batcher(
        BatcherSettings(**settings),  # type: ignore[arg-type]
        ColdVersion(),
        nodes,
    )
    results, done = collector(count)
    for i in range(count):
        service.submit(item(i), results.append, stream=1)
    async with asyncio.timeout(10):
        await done.wait()
    await service.close()
    return results


class Results(list[batcher_pb2.ItemResult]):
    """A sink that sets ``done`` once ``count`` results came."""

    def __init__(self, count: int, done: asyncio.Event) -> None:
        super().__init__()
        self._count, self._done = count, done

    def append(self, result: batcher_pb2.ItemResult) -> None:
        super().append(result)
        if len(self) >= self._count:
            self._done.set()


def collector(count: int) -> tuple[Results, asyncio.Event]:
    done = asyncio.Event()
    return Results(count, done), done


async def test_a_version_placed_nowhere_is_loaded_where_most_room_is_and_answered() -> None:
    nodes = {
        "n1": FakeNode("n1", budget=100 * MIB, held={"x:1": 80 * MIB}),
        "n2": FakeNode("n2", budget=100 * MIB),
    }
    results = await submit_all(nodes, 5)
    assert [r.status.code for r in results] == [0] * 5
    assert nodes["n2"].loads == [COLD] and nodes["n1"].loads == [], "one load, on the node with room"
    assert sum(len(c) for c in nodes["n2"].calls) == 5 and not nodes["n1"].calls


async def test_no_room_on_any_node_is_resource_exhausted_and_tried_once() -> None:
    nodes = {"n1": FakeNode("n1", load_answer=NO_ROOM), "n2": FakeNode("n2", load_answer=NO_ROOM)}
    results = await submit_all(nodes, 3)
    assert {r.status.code for r in results} == {grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]}
    assert "no node has room for cold:1" in results[0].status.message
    assert results[0].status.details, "with its reason"
    assert sorted(nodes["n1"].loads + nodes["n2"].loads) == [COLD, COLD], (
        "each node asked once, not per request"
    )
    retry = [d for r in results for d in r.status.details if d.Is(error_details_pb2.RetryInfo.DESCRIPTOR)]
    assert len(retry) == len(results), "each caller is told when a load will be tried again"
    reasons = {info.reason for r in results for d in r.status.details if (info := _error_info(d)) is not None}
    assert reasons == {Reason.NO_ROOM}


async def test_a_load_that_fails_answers_with_the_nodes_reason() -> None:
    broken = node_pb2.LoadModelResponse(state=node_pb2.VERSION_STATE_FAILED, reason="sha256 mismatch")
    nodes = {"n1": FakeNode("n1", load_answer=broken), "n2": FakeNode("n2", load_answer=broken)}
    results = await submit_all(nodes, 2)
    assert {r.status.code for r in results} == {grpc.StatusCode.UNAVAILABLE.value[0]}
    assert "sha256 mismatch" in results[0].status.message
    assert len(nodes["n1"].loads + nodes["n2"].loads) == 1, "a broken version is not tried on every node"


async def test_off_it_is_refused_at_once_and_nothing_loads() -> None:
    nodes = {"n1": FakeNode("n1"), "n2": FakeNode("n2")}
    results = await submit_all(nodes, 1, load_on_demand=False)
    assert results[0].status.code == grpc.StatusCode.UNAVAILABLE.value[0]
    assert not nodes["n1"].loads and not nodes["n2"].loads


def _error_info(detail: any_pb2.Any) -> error_details_pb2.ErrorInfo | None:
    info = error_details_pb2.ErrorInfo()
    return info if detail.Unpack(info) else None


class ScaledToZero(ColdVersion):
    """No live node until ``wake``: a pool scaled to zero."""

    awake = False

    def node_versions(self, heartbeat_timeout_s: float) -> NodeVersions:
        if self.awake:
            return super().node_versions(heartbeat_timeout_s)
        return NodeVersions(ready={}, failed={})


async def test_scaled_to_zero_the_request_waits_for_a_node_and_is_answered() -> None:
    registry = ScaledToZero()
    nodes = {"n1": FakeNode("n1"), "n2": FakeNode("n2")}
    directory, service = await real_time_batcher(BatcherSettings(hold_for_node=True), registry, nodes)
    results, done = collector(1)
    service.submit(item(0), results.append, stream=1)
    await asyncio.sleep(0.2)
    assert not results, "held, not refused, while no node is up"
    registry.awake = True  # the queue's depth woke the pool
    await directory.refresh()
    async with asyncio.timeout(10):
        await done.wait()
    await service.close()
    assert results[0].status.code == 0, results[0].status.message
    assert nodes["n1"].loads + nodes["n2"].loads == [COLD]


async def test_with_no_node_and_no_hold_it_is_refused_at_once() -> None:
    nodes = {"n1": FakeNode("n1")}
    _, service = await real_time_batcher(BatcherSettings(), ScaledToZero(), nodes)
    results, done = collector(1)
    service.submit(item(0), results.append, stream=1)
    async with asyncio.timeout(5):
        await done.wait()
    await service.close()
    assert results[0].status.code == grpc.StatusCode.UNAVAILABLE.value[0]
    assert "no ready node" in results[0].status.message


class OnOneNode(ColdVersion):
    """``m:1`` (one row a batch) served by n1 alone; n2 is live and serves nothing."""

    def all_versions(self) -> list[tuple[str, ModelVersion]]:
        one = ModelVersion(
            model_id=1,
            version="1",
            artifact_uri="/m",
            sha256="",
            format="python",
            io_schema=SCHEMA,
            max_batch_size=1,
        )
        return [("m", one)]

    def node_versions(self, heartbeat_timeout_s: float) -> NodeVersions:
        return NodeVersions(ready={"m:1": [("n1", "n1:1")]}, failed={}, nodes={"n1": "n1:1", "n2": "n2:1"})


def hot_item(index: int) -> batcher_pb2.SubmitItem:
    submitted = item(index)
    submitted.model = "m"
    return submitted


async def hot(nodes: dict[str, FakeNode], count: int) -> list[batcher_pb2.ItemResult]:
    """``count`` requests at once for ``m:1``, one batch at a time on its one replica, with
    one more replica asked for once the oldest has waited 50 ms."""
    settings = BatcherSettings(
        scale_out_after_s=0.05, max_tenant_inflight_per_node=1, max_inflight_per_node=1
    )
    _, service = await real_time_batcher(settings, OnOneNode(), nodes)
    results, done = collector(count)
    for i in range(count):
        service.submit(hot_item(i), results.append, stream=1)
    async with asyncio.timeout(10):
        await done.wait()
    await service.close()
    return results


async def test_a_version_whose_replicas_stay_busy_gets_one_more_where_it_fits() -> None:
    nodes = {"n1": FakeNode("n1", slow_s=0.3, capacity=1), "n2": FakeNode("n2", budget=100 * MIB)}
    results = await hot(nodes, 6)
    assert [r.status.code for r in results] == [0] * 6
    assert nodes["n2"].loads == ["m:1"], "one more replica, on the node without one"
    assert nodes["n2"].calls, "and it took batches"


async def test_one_more_replica_never_evicts_another_version() -> None:
    full = FakeNode("n2", budget=100 * MIB, held={"other:1": 100 * MIB})
    results = await hot({"n1": FakeNode("n1", slow_s=0.2, capacity=1), "n2": full}, 4)
    assert [r.status.code for r in results] == [0] * 4, "served by the one replica, in turn"
    assert full.loads == [] and "other:1" in full.held


async def test_a_load_longer_than_the_deadline_answers_in_time_and_serves_the_next_request() -> None:
    """The caller is not held past its deadline; the load goes on, once, and the next
    request finds the version warm."""
    nodes = {"n1": FakeNode("n1", load_s=2.0), "n2": FakeNode("n2", load_s=2.0)}
    directory, service = await real_time_batcher(BatcherSettings(), ColdVersion(), nodes)
    early, early_done = collector(1)
    hurried = item(0)
    hurried.time_budget.FromMilliseconds(150)
    service.submit(hurried, early.append, stream=1)
    async with asyncio.timeout(5):
        await early_done.wait()
    assert directory.loads.pending(COLD), "answered by its own deadline, while the load still runs"
    assert early[0].status.code == grpc.StatusCode.DEADLINE_EXCEEDED.value[0]
    async with asyncio.timeout(5):  # the load finishes without anyone waiting for it
        await directory.loads.wait(COLD, 5)
    later, later_done = collector(1)
    service.submit(item(1), later.append, stream=1)
    async with asyncio.timeout(5):
        await later_done.wait()
    await service.close()
    assert later[0].status.code == 0
    assert len(nodes["n1"].loads + nodes["n2"].loads) == 1, "one load for both"


async def test_a_caller_that_leaves_while_its_version_loads_takes_nothing_with_it() -> None:
    nodes = {"n1": FakeNode("n1", load_s=0.3), "n2": FakeNode("n2", load_s=0.3)}
    _, service = await real_time_batcher(BatcherSettings(), ColdVersion(), nodes)
    gone: list[batcher_pb2.ItemResult] = []
    service.submit(item(0), gone.append, stream=1)
    await asyncio.sleep(0.05)
    service.cancel(1, "r0")
    stayed, done = collector(1)
    service.submit(item(1), stayed.append, stream=2)
    async with asyncio.timeout(5):
        await done.wait()
    await service.close()
    assert not gone, "the one who left is not answered"
    assert stayed[0].status.code == 0
    assert len(nodes["n1"].loads + nodes["n2"].loads) == 1
    assert all(len(call) == 1 and call[0] == "r1" for node in nodes.values() for call in node.calls)


async def test_an_item_refused_for_its_own_fault_makes_no_node_load() -> None:
    """A malformed or late request for a version placed nowhere is refused before anything
    is asked of the fleet: it cannot make a node load, and evict another's version, free."""
    nodes = {"n1": FakeNode("n1"), "n2": FakeNode("n2")}
    _, service = await real_time_batcher(BatcherSettings(), ColdVersion(), nodes)
    empty = item(0)
    empty.inputs[0].tensor.shape[:] = [0, 2]
    empty.inputs[0].tensor.data = b""
    late = item(1)
    late.time_budget.FromNanoseconds(0)
    results, done = collector(2)
    service.submit(empty, results.append, stream=1)
    service.submit(late, results.append, stream=1)
    async with asyncio.timeout(5):
        await done.wait()
    await asyncio.sleep(0.05)
    await service.close()
    assert {r.status.code for r in results} <= {
        grpc.StatusCode.INVALID_ARGUMENT.value[0],
        grpc.StatusCode.DEADLINE_EXCEEDED.value[0],
    }
    assert nodes["n1"].loads == nodes["n2"].loads == []
