"""The dispatcher and the replica directory with fake nodes (no sockets): retries, bisection,
breakers, deadlines and replica picks."""

from __future__ import annotations

import dataclasses
import random

import grpc
import pytest
from batcher_fakes import KEY, NODES, Rig, rig

from ferryman.v1 import batcher_pb2
from ferryman_server.batcher.breaker import BreakerState
from ferryman_server.batcher.entries import Entry, Waiter
from ferryman_server.batcher.fairness import SlotPolicy
from ferryman_server.batcher.predictor import LatencyPredictor
from ferryman_server.batcher.replicas import PowerOfTwoChoices


def entries(ids: list[str], deadline: float = 1010.0) -> list[Entry]:
    def sink(result: batcher_pb2.ItemResult) -> None:
        return None

    return [
        Entry(
            key=i,
            queue=("m", "1", ()),
            tenant="t",
            request_id=i,
            priority=2,
            arrival=1000.0,
            deadline=deadline,
            rows=1,
            inputs=[],
            input_hash=i,
            waiters=[Waiter(request_id=i, stream=0, arrival=1000.0, deadline=deadline, sink=sink)],
        )
        for i in ids
    ]


async def send(r: Rig, batch: list[Entry], first: str = "n1") -> None:
    """Dispatch ``batch`` with its first attempt on ``first``."""
    other = {n for n in NODES if n != first}
    replica = r.dispatcher.reserve(KEY, len(batch), "t", frozenset(other))
    assert replica is not None and replica.name == first
    await r.dispatcher.dispatch(
        "m", "1", {}, batch, LatencyPredictor(default_s=0.001, smoothing=0.2), replica
    )


def state(r: Rig, node: str) -> BreakerState:
    return r.directory.replicas[node].breaker.state


def codes(r: Rig) -> dict[str, int]:
    return {i: result.status.code for i, result in r.results.items()}


async def test_a_failing_node_is_retried_on_another() -> None:
    r = await rig()
    r.nodes["n1"].fail = grpc.StatusCode.UNAVAILABLE
    await send(r, entries(["a", "b"]))
    assert codes(r) == {"a": 0, "b": 0}
    assert r.nodes["n1"].calls == [["a", "b"]] and r.nodes["n2"].calls == [["a", "b"]]
    n1 = r.directory.replicas["n1"]
    assert n1.breaker.failures == 1 and n1.inflight == 0 and n1.tenant_slots == {}


async def test_bisection_fails_only_the_poison_item() -> None:
    r = await rig()
    ids = ["a", "b", "c", "poison", "e", "f", "g", "h"]
    await send(r, entries(ids))
    assert codes(r) == {i: (grpc.StatusCode.INTERNAL.value[0] if i == "poison" else 0) for i in ids}
    assert [letter.request_id for letter in r.letters] == ["poison"]
    calls = r.nodes["n1"].calls + r.nodes["n2"].calls
    # The whole batch, then halves down to the poison alone: 1 + 2 + 2 + 2 (+1 retried alone).
    assert len(calls) <= 8 and ["poison"] in calls
    assert all(r.directory.replicas[n].breaker.state == BreakerState.CLOSED for n in NODES)


async def test_a_deadline_is_not_the_nodes_fault() -> None:
    r = await rig(breaker_threshold=2)
    r.nodes["n1"].fail = grpc.StatusCode.DEADLINE_EXCEEDED
    for i in range(4):
        # The items' own budget (0.5 s) is shorter than a batch's timeout: it is what ran out.
        await send(r, entries([f"x{i}"], deadline=1000.5))
    assert set(codes(r).values()) == {grpc.StatusCode.DEADLINE_EXCEEDED.value[0]}
    assert r.directory.replicas["n1"].breaker.state == BreakerState.CLOSED
    assert r.nodes["n2"].calls == []  # no retry: the callers' budget is what ran out


async def test_a_hung_node_opens_its_breaker_at_once_and_the_batch_runs_elsewhere() -> None:
    r = await rig(breaker_threshold=3, min_batch_timeout_s=0.05, batch_timeout_factor=4.0)
    r.nodes["n1"].hung = True
    probed = r.nodes["n1"].probes  # the directory's own, at its refresh
    await send(r, entries(["a", "b"]))  # 10 s of budget: far more than the batch's timeout
    assert codes(r) == {"a": 0, "b": 0}, "retried on the other node within the deadline"
    assert r.nodes["n2"].calls == [["a", "b"]]
    assert r.nodes["n1"].probes == probed + 1, "one unanswered probe after the batch's timeout"
    assert state(r, "n1") == BreakerState.OPEN, "one timeout is enough: a hung node answers nothing"
    assert all(r.directory.pick(KEY, set()) is r.directory.replicas["n2"] for _ in range(20))


async def test_a_slow_node_that_answers_its_probes_keeps_its_batch() -> None:
    r = await rig(min_batch_timeout_s=0.02, batch_timeout_factor=4.0)
    r.nodes["n1"].slow_s = 0.15  # far past 4 x the predicted 1 ms, and past the 20 ms floor
    probed = r.nodes["n1"].probes
    await send(r, entries(["a"]))
    assert codes(r) == {"a": 0}
    assert r.nodes["n1"].probes >= probed + 2 and r.nodes["n2"].calls == [], "alive: no retry, no breaker"
    assert state(r, "n1") == BreakerState.CLOSED


async def test_a_non_retriable_error_is_answered_at_once() -> None:
    r = await rig()
    r.nodes["n1"].fail = grpc.StatusCode.INVALID_ARGUMENT
    await send(r, entries(["a"]))
    assert codes(r) == {"a": grpc.StatusCode.INVALID_ARGUMENT.value[0]}
    assert r.nodes["n2"].calls == []


async def test_every_attempt_failing_ends_unavailable() -> None:
    r = await rig(max_attempts=3)
    for node in r.nodes.values():
        node.fail = grpc.StatusCode.UNAVAILABLE
    await send(r, entries(["a"]))
    assert codes(r) == {"a": grpc.StatusCode.UNAVAILABLE.value[0]}
    assert len(r.nodes["n1"].calls) + len(r.nodes["n2"].calls) == 3


async def test_the_breaker_opens_keeps_the_node_out_and_half_opens_after_cooldown() -> None:
    r = await rig(breaker_threshold=2, breaker_cooldown_s=5.0)
    r.nodes["n1"].fail = grpc.StatusCode.UNAVAILABLE
    for i in range(2):
        await send(r, entries([f"a{i}"]))
    n1 = r.directory.replicas["n1"]
    assert state(r, "n1") == BreakerState.OPEN
    assert all(r.directory.pick(KEY, set()) is r.directory.replicas["n2"] for _ in range(20))
    assert r.directory.capacity(KEY).replicas == 1
    r.clock.now += 5.0
    r.nodes["n1"].fail = None
    picked = {r.directory.pick(KEY, {"n2"}) for _ in range(3)}
    assert picked == {n1}  # half-open: it may take a trial batch again
    await send(r, entries(["trial"]))
    assert state(r, "n1") == BreakerState.CLOSED


async def test_pick_prefers_fewer_outstanding_rows_and_obeys_the_slot_policy() -> None:
    r = await rig()
    n1, n2 = r.directory.replicas["n1"], r.directory.replicas["n2"]
    n1.outstanding_rows, n2.outstanding_rows = 40, 3
    assert all(r.directory.pick(KEY, set()) is n2 for _ in range(10))
    n2.inflight = 1
    n2.tenant_slots = {"heavy": 1}
    policy = SlotPolicy(limit=2, caps={"heavy": 1})
    assert r.directory.pick(KEY, set(), "heavy", policy) is n1
    assert r.directory.blocked(KEY, policy, ["heavy", "light"]) == frozenset()
    n1.inflight, n1.tenant_slots = 1, {"heavy": 1}
    assert r.directory.pick(KEY, set(), "heavy", policy) is None
    assert r.directory.blocked(KEY, policy, ["heavy", "light"]) == {"heavy"}


@pytest.mark.parametrize("failing", [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED])
async def test_slots_are_released_on_every_path(failing: grpc.StatusCode) -> None:
    r = await rig()
    r.nodes["n1"].fail = failing
    await send(r, entries(["a", "poison-b", "c"]))
    for replica in r.directory.replicas.values():
        assert replica.inflight == 0 and replica.outstanding_rows == 0 and replica.tenant_slots == {}


async def test_a_bug_building_the_node_request_gives_the_slot_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """The dispatcher's catch-all answers the callers; the slot the batch held is given back
    too, or the replica would count it busy for good (starving its tenant on a CPU node)."""

    def broken() -> str:
        raise RuntimeError("a bug building the request")

    monkeypatch.setattr("ferryman_server.batcher.dispatcher.traceparent", broken)
    r = await rig()
    await send(r, entries(["a", "b"]))
    assert set(codes(r).values()) == {grpc.StatusCode.INTERNAL.value[0]}
    for replica in r.directory.replicas.values():
        assert replica.inflight == 0 and replica.outstanding_rows == 0 and replica.tenant_slots == {}


async def test_power_of_two_choices_never_takes_the_busiest_of_several() -> None:
    r = await rig()
    n1, n2 = r.directory.replicas["n1"], r.directory.replicas["n2"]
    spare = dataclasses.replace(n1, name="n3")
    n1.outstanding_rows, n2.outstanding_rows, spare.outstanding_rows = 0, 10, 20
    choice = PowerOfTwoChoices(random.Random(1))
    picked = [choice.choose([n1, n2, spare]).name for _ in range(200)]
    assert "n3" not in picked and picked.count("n1") > picked.count("n2") > 0
    assert choice.choose([n2]) is n2


async def test_batches_in_flight_follow_each_nodes_capacity_unless_set() -> None:
    r = await rig()
    r.nodes[NODES[0]].capacity = 1  # a CPU node: one batch at a time
    for replica in r.directory.replicas.values():
        replica.versions = frozenset()  # seen anew: NodeInfo is read again
    await r.directory.refresh()
    slots = {name: r.directory.slots(replica) for name, replica in r.directory.replicas.items()}
    assert slots == {NODES[0]: 1, NODES[1]: 2}
    assert r.directory.capacity(KEY).total_slots == 3
    assert r.directory.slots_per_replica(KEY) == 2
    # The setting, when given, holds for every node whatever it reports.
    fixed = await rig(max_inflight_per_node=4)
    assert fixed.directory.capacity(KEY).total_slots == 4 * len(NODES)


async def test_on_a_cpu_node_one_tenant_holds_one_slot_and_another_tenant_the_other() -> None:
    r = await rig()
    for node in r.nodes.values():
        node.device = "cpu"
    for replica in r.directory.replicas.values():
        replica.versions = frozenset()
    await r.directory.refresh()
    policy = SlotPolicy(limit=2)
    held = [r.dispatcher.reserve(KEY, 1, "heavy", policy=policy) for _ in NODES]
    assert all(held) and {h.name for h in held if h} == set(NODES)  # one on each node
    # Its next batch waits (and grows) for one of its own to finish ...
    assert r.dispatcher.reserve(KEY, 1, "heavy", policy=policy) is None
    # ... while another tenant's short request still finds a free slot at once.
    assert r.dispatcher.reserve(KEY, 1, "light", policy=policy) is not None
    # A GPU node (or the setting) lets one tenant pipeline batches.
    gpu = await rig()
    assert gpu.dispatcher.reserve(KEY, 1, "heavy", policy=policy) is not None
    assert gpu.directory.tenant_slots(next(iter(gpu.directory.replicas.values()))) == 2


async def test_a_version_gone_from_its_node_is_run_elsewhere_and_the_node_keeps_its_breaker() -> None:
    """Evicted for another version's load before its heartbeat said so: the node answers
    FAILED_PRECONDITION. It is not a sick node: its breaker stays closed, the version is
    dropped from it at once, and the batch runs on the other replica."""
    r = await rig()
    r.nodes["n1"].fail = grpc.StatusCode.FAILED_PRECONDITION
    await send(r, entries(["x0"]))
    assert codes(r) == {"x0": 0}
    assert state(r, "n1") == BreakerState.CLOSED
    assert KEY not in r.directory.replicas["n1"].versions
    assert r.nodes["n2"].calls == [["x0"]]
