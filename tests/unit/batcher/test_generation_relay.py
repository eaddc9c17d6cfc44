"""The generation relay with fake nodes (no sockets): replica choice, failover only before
the first event, refusals passed on with their reason, draining and unknown versions."""

from __future__ import annotations

import grpc
import pytest
from batcher_fakes import GENERATED, KEY, Registry, Rig, rig

from ferryman.errors import CallFailed, Reason, status_code, unpack_details
from ferryman.v1 import batcher_pb2, node_pb2
from ferryman_server.batcher.generation import GenerationRelay
from ferryman_server.registry.snapshot import NodeVersions
from ferryman_server.registry.tables import ModelVersion

DEADLINE = 1010.0


def relay(r: Rig, accepting: bool = True, attempts: int = 3) -> GenerationRelay:
    return GenerationRelay(r.directory, attempts, lambda: accepting, clock=r.clock)


def request(request_id: str = "g1", version: str = "1") -> batcher_pb2.GenerateItem:
    return batcher_pb2.GenerateItem(model="m", version=version, request_id=request_id, max_tokens=3)


async def collect(relay: GenerationRelay, req: batcher_pb2.GenerateItem) -> list[batcher_pb2.GenerationEvent]:
    return [event async for event in relay.generate(req, DEADLINE)]


def reason(failed: CallFailed) -> str:
    info = unpack_details(failed.status)["ErrorInfo"]
    return str(info.reason)  # type: ignore[attr-defined]


async def test_a_generation_streams_from_the_replica_with_the_fewest_running() -> None:
    r = await rig()
    r.directory.replicas["n1"].generations = 2  # busy with two others
    events = await collect(relay(r), request())
    assert [e.completion_tokens for e in events] == list(range(1, GENERATED + 1))
    assert r.nodes["n2"].generations == ["g1"] and r.nodes["n1"].generations == []
    assert r.directory.replicas["n2"].generations == 0, "the stream's count ends with it"


async def test_a_node_that_refuses_before_the_first_event_is_replaced() -> None:
    r = await rig()
    r.nodes["n1"].fail = grpc.StatusCode.UNAVAILABLE
    r.directory.replicas["n2"].generations = 1  # n1 is picked first
    events = await collect(relay(r), request())
    assert len(events) == GENERATED
    assert r.nodes["n1"].generations == ["g1"] and r.nodes["n2"].generations == ["g1"]


async def test_a_node_that_dies_mid_stream_is_not_replaced() -> None:
    """Tokens already reached the caller: a second run would be another answer."""
    r = await rig()
    r.nodes["n1"].dies_after = 1
    r.directory.replicas["n2"].generations = 1
    seen: list[batcher_pb2.GenerationEvent] = []
    with pytest.raises(CallFailed) as failed:
        async for event in relay(r).generate(request(), DEADLINE):
            seen.append(event)
    assert len(seen) == 1 and r.nodes["n2"].generations == []
    assert status_code(failed.value.status) == grpc.StatusCode.UNAVAILABLE


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (grpc.StatusCode.INVALID_ARGUMENT, Reason.INVALID_INPUT),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, Reason.QUOTA_EXCEEDED),
        (grpc.StatusCode.DEADLINE_EXCEEDED, Reason.DEADLINE),
    ],
)
async def test_a_refusal_about_the_request_is_passed_on_not_retried(
    code: grpc.StatusCode, expected: str
) -> None:
    r = await rig()
    for node in r.nodes.values():
        node.fail = code
    with pytest.raises(CallFailed) as failed:
        await collect(relay(r), request())
    assert status_code(failed.value.status) == code and reason(failed.value) == expected
    assert sum(len(n.generations) for n in r.nodes.values()) == 1


async def test_every_replica_down_is_unavailable_after_each_was_tried_once() -> None:
    r = await rig()
    for node in r.nodes.values():
        node.fail = grpc.StatusCode.UNAVAILABLE
    with pytest.raises(CallFailed) as failed:
        await collect(relay(r), request())
    assert status_code(failed.value.status) == grpc.StatusCode.UNAVAILABLE
    assert reason(failed.value) == Reason.NO_REPLICA
    assert [len(n.generations) for n in r.nodes.values()] == [1, 1]


async def test_draining_and_unknown_versions_are_refused_before_any_node() -> None:
    r = await rig()
    with pytest.raises(CallFailed) as draining:
        await collect(relay(r, accepting=False), request())
    assert reason(draining.value) == Reason.DRAINING
    with pytest.raises(CallFailed) as unknown:
        await collect(relay(r), request(version="9"))
    assert status_code(unknown.value.status) == grpc.StatusCode.NOT_FOUND
    assert not any(n.generations for n in r.nodes.values())
    assert KEY in r.directory.versions


async def test_a_caller_that_leaves_releases_its_replica() -> None:
    r = await rig()
    events = relay(r).generate(request(), DEADLINE)
    await anext(events)
    assert sum(replica.generations for replica in r.directory.replicas.values()) == 1
    await events.aclose()
    assert sum(replica.generations for replica in r.directory.replicas.values()) == 0


class ColdVersion(Registry):
    """``m:cold`` is registered and served by no node (both nodes are live)."""

    def all_versions(self) -> list[tuple[str, ModelVersion]]:
        cold = ModelVersion(
            model_id=1, version="cold", artifact_uri="/lm", sha256="", format="causal_lm", io_schema=LM_SCHEMA
        )
        return [*super().all_versions(), ("m", cold)]

    def node_versions(self, heartbeat_timeout_s: float) -> NodeVersions:
        ready = super().node_versions(heartbeat_timeout_s).ready
        return NodeVersions(ready=ready, failed={}, nodes={"n1": "n1:1", "n2": "n2:1"})


LM_SCHEMA = {
    "inputs": [{"name": "text", "text": True}],
    "outputs": [{"name": "ids", "dtype": "INT64", "shape": [1]}],
}


async def test_a_generation_for_a_version_no_node_serves_waits_for_its_load() -> None:
    r = await rig(ColdVersion())
    events = await collect(relay(r), request(version="cold"))
    assert len(events) == GENERATED
    assert r.nodes["n1"].loads + r.nodes["n2"].loads == ["m:cold"], "loaded once, on one node"
    (where,) = [name for name, node in r.nodes.items() if node.generations == ["g1"]]
    assert r.nodes[where].loads == ["m:cold"], "it ran where it was loaded"


async def test_a_generation_whose_load_fails_is_refused_with_the_nodes_reason() -> None:
    r = await rig(ColdVersion())
    broken = node_pb2.LoadModelResponse(state=node_pb2.VERSION_STATE_FAILED, reason="not a GGUF file")
    for node in r.nodes.values():
        node.load_answer = broken
    with pytest.raises(CallFailed) as failed:
        await collect(relay(r), request(version="cold"))
    assert status_code(failed.value.status) == grpc.StatusCode.UNAVAILABLE
    assert "not a GGUF file" in failed.value.status.message
