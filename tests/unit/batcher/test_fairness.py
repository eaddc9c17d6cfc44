"""Fair sharing between tenants: virtual-time order, the ledger, slot shares, and how the
scheduler uses them (no sockets, a fake clock)."""

from __future__ import annotations

from dataclasses import dataclass

from ferryman_server.batcher.fairness import (
    FairShare,
    FairView,
    SlotPolicy,
    batch_owner,
    fair_order,
    outranked,
    slot_share,
)
from ferryman_server.batcher.predictor import LatencyPredictor
from ferryman_server.batcher.scheduler import Load, SchedulerConfig, decide

ROW_COST_S = 0.010
CONFIG = SchedulerConfig(
    max_batch_rows=8, max_window_s=0.010, slack_margin_s=0.002, aging_s=0.050, headroom=1.25
)
IDLE = Load(arrival_rate=0.0, free_slots=2, total_slots=2, idle_replicas=1)


@dataclass
class Item:
    tenant: str
    priority: int = 2
    arrival: float = 0.0
    deadline: float = 100.0
    rows: int = 1


def test_a_deep_backlog_does_not_push_a_newcomer_to_the_back() -> None:
    heavy = [Item("heavy", arrival=0.0) for _ in range(20)]
    light = [Item("light", arrival=5.0), Item("light", arrival=5.0)]
    items = heavy + light
    order = fair_order(items, range(len(items)), now=5.0, aging_s=0.0, row_cost_s=ROW_COST_S, view=FairView())
    # Both tenants start at the same virtual time: they alternate, so the light tenant's two
    # items are among the first four, however long the heavy tenant's queue.
    assert {items[i].tenant for i in order[:4]} == {"heavy", "light"}
    assert sorted(order[:4]) == [0, 1, 20, 21]


def test_a_tenant_that_used_more_waits_behind_one_that_used_less() -> None:
    fair = FairShare(active_window_s=5.0)
    fair.charge({"heavy": 1.0}, now=0.0)  # a second of node time already dispatched
    items = [Item("heavy"), Item("light")]
    assert fair_order(items, [0, 1], 0.0, 0.0, ROW_COST_S, fair.view()) == [1, 0]


def test_priority_orders_a_tenants_own_work_but_buys_no_share() -> None:
    fair = FairShare(active_window_s=5.0)
    fair.charge({"pushy": 0.5}, now=0.0)
    items = [
        Item("pushy", priority=4, deadline=0.1),
        Item("polite", priority=1),
        Item("pushy", priority=1),
    ]
    order = fair_order(items, [0, 1, 2], 0.0, 0.0, ROW_COST_S, fair.view())
    assert order[0] == 1  # high priority and a tight deadline do not jump the fair order
    assert order.index(0) < order.index(2)  # within the tenant, high priority first


def test_weights_scale_the_share() -> None:
    fair = FairShare(active_window_s=5.0, weights={"gold": 3.0})
    items = [Item("gold") for _ in range(6)] + [Item("basic") for _ in range(6)]
    order = fair_order(items, range(12), 0.0, 0.0, ROW_COST_S, fair.view())
    first_four = [items[i].tenant for i in order[:4]]
    assert first_four.count("gold") == 3 and first_four.count("basic") == 1


def test_a_tenant_back_from_idle_banks_no_credit() -> None:
    fair = FairShare(active_window_s=1.0)
    for t in range(10):
        fair.charge({"busy": 1.0}, now=float(t))
    view = fair.view()
    # The newcomer starts at the system's virtual time, not at zero: it does not get ten
    # seconds of node time in a row to catch up.
    assert view.tag("newcomer") == fair.virtual_time > 0
    assert view.tag("busy") - view.tag("newcomer") <= 1.0


def test_the_ledger_forgets_idle_tenants() -> None:
    fair = FairShare(active_window_s=1.0)
    for i in range(100):
        fair.charge({f"t{i}": 0.001}, now=0.0)
    fair.charge({"late": 5.0}, now=10.0)
    fair.charge({"late": 5.0}, now=10.0)
    assert set(fair.view().start) == {"late"}


def test_slot_share_keeps_a_slot_open_for_others() -> None:
    assert slot_share(limit=2, weight=1.0, active_weight=1.0) == 2  # alone: everything
    assert slot_share(limit=2, weight=1.0, active_weight=2.0) == 1
    assert slot_share(limit=2, weight=1.0, active_weight=5.0) == 1  # never below one
    assert slot_share(limit=4, weight=3.0, active_weight=4.0) == 3
    fair = FairShare(active_window_s=1.0)
    fair.seen("light", now=0.0)
    assert fair.slot_cap("heavy", 2, now=0.5) == 1
    assert fair.slot_cap("heavy", 2, now=1.5) == 2  # the light tenant went quiet


def test_a_batch_counts_against_the_tenant_with_most_rows() -> None:
    assert batch_owner({"a": 3, "b": 5}) == "b"
    assert batch_owner({"b": 2, "a": 2}) == "a"  # ties: a stable choice
    assert batch_owner({}) == ""


def test_decide_leaves_a_blocked_tenants_items_queued() -> None:
    p = LatencyPredictor(default_s=0.001, smoothing=0.2)
    items = [Item("heavy"), Item("light"), Item("heavy")]
    decision = decide(0.0, items, CONFIG, p, IDLE, fair=FairView(blocked=frozenset({"heavy"})))
    assert decision.batch == [1]
    only_heavy = decide(0.0, [Item("heavy")], CONFIG, p, IDLE, fair=FairView(blocked=frozenset({"heavy"})))
    assert only_heavy.batch == [] and only_heavy.expired == []


def test_a_batch_never_takes_an_item_it_would_make_late() -> None:
    # 10 ms per batch + 10 ms per row: one row takes 20 ms, two take 30 ms.
    p = LatencyPredictor(default_s=0.02, smoothing=0.2)
    p.seed({1: 0.020, 8: 0.090})
    items = [Item("a", deadline=0.025), Item("b", deadline=1.0), Item("c", deadline=1.0)]
    decision = decide(0.0, items, CONFIG, p, IDLE)
    # The urgent item goes alone: with another row the batch would end after its deadline.
    assert decision.batch == [0]
    relaxed = decide(0.0, [Item("b", deadline=1.0), Item("c", deadline=1.0)], CONFIG, p, IDLE)
    assert sorted(relaxed.batch) == [0, 1]


def test_free_slots_go_to_the_waiting_tenants_whose_next_batches_finish_first() -> None:
    waiting = {"heavy-a": (9.0, 10.3), "heavy-b": (8.0, 9.3), "light": (1.0, 1.01)}
    assert outranked(1, waiting) == {"heavy-a", "heavy-b"}
    assert outranked(2, waiting) == {"heavy-a"}
    assert outranked(3, waiting) == frozenset()  # a slot for everyone: nobody waits
    assert outranked(0, waiting) == set(waiting)
    assert outranked(1, {"b": (1.0, 2.0), "a": (1.0, 2.0)}) == {"b"}  # ties: every queue picks the same


def test_a_short_request_goes_before_a_long_batch_that_starts_as_early() -> None:
    # A tenant back from idle and a heavy one that left it the kept slot start near the
    # system's virtual time (here the heavy one a little earlier): the short request's
    # batch finishes first, so it goes first, whatever the names.
    waiting = {"a-heavy": (0.070, 0.070 + 0.76), "z-light": (0.073, 0.073 + 0.0002)}
    assert outranked(1, waiting) == {"a-heavy"}
    # Its finish times grow with its use: once past the heavy one's, the heavy one goes.
    assert outranked(1, {"a-heavy": (0.070, 0.83), "z-light": (0.9, 0.9002)}) == {"z-light"}


def test_the_last_free_slot_is_kept_for_an_idle_tenant_with_none() -> None:
    policy = SlotPolicy(limit=2, caps={"a": 1, "b": 1, "light": 1}, idle=frozenset({"light"}))
    assert policy.allows("a", {}, inflight=0)
    # "a" holds one slot: "b" may not take the last one while "light" (active, nothing
    # queued, no slot) would have to wait for a long batch when its next request comes.
    assert not policy.allows("b", {"a": 1}, inflight=1)
    assert policy.allows("light", {"a": 1}, inflight=1)
    assert not policy.allows("a", {"a": 1}, inflight=1)  # its cap
    assert not policy.allows("light", {"a": 1, "b": 1}, inflight=2)  # nothing free
    # Nobody idle (everyone active is queued): every slot is used.
    busy = SlotPolicy(limit=2, caps={"a": 1, "b": 1})
    assert busy.allows("b", {"a": 1}, inflight=1)
    # An idle tenant that already holds a slot there needs no other.
    assert SlotPolicy(limit=2, idle=frozenset({"light"})).allows("a", {"light": 1}, inflight=1)
    # Alone, a tenant may use every slot.
    assert SlotPolicy(limit=2).allows("a", {"a": 1}, inflight=1)


def test_long_work_never_takes_the_last_free_slot_whoever_is_active() -> None:
    long = SlotPolicy(limit=3, long=True)
    assert long.allows("heavy", {}, inflight=0)
    assert long.allows("heavy", {"heavy": 1}, inflight=1)
    assert not long.allows("heavy", {"heavy": 2}, inflight=2), "alone, it still leaves one"
    assert not long.allows("other", {"heavy": 2}, inflight=2), "another tenant's long work too"
    assert SlotPolicy(limit=3).allows("light", {"heavy": 2}, inflight=2), "short work takes it"
    # A node's only slot cannot be kept: long work runs there, one batch at a time.
    assert SlotPolicy(limit=1, long=True).allows("heavy", {}, inflight=0)


def test_a_nodes_only_slot_is_never_kept_idle() -> None:
    # One batch at a time (a CPU node's default): keeping its only slot for an idle tenant
    # would stop the node for everyone until that tenant sent something.
    only = SlotPolicy(limit=1, idle=frozenset({"light"}))
    assert only.allows("a", {}, inflight=0)
    assert not only.allows("a", {"a": 1}, inflight=1)  # nothing free


def test_background_work_takes_only_capacity_no_tenant_wants() -> None:
    quiet = SlotPolicy(limit=2, contended=False)
    busy = SlotPolicy(limit=2, contended=True)
    assert quiet.allows("~shadow", held={}, inflight=0)
    assert not quiet.allows("~shadow", held={}, inflight=1)  # the last free slot is kept
    assert not busy.allows("~shadow", held={}, inflight=0)  # a tenant waits: it goes first
    assert busy.allows("acme", held={}, inflight=1)
    only = SlotPolicy(limit=1, contended=False)
    assert only.allows("~shadow", held={}, inflight=0)  # an idle node's only slot
    fair = FairShare(active_window_s=1.0)
    fair.seen("~shadow", now=0.0)
    fair.seen("~job:acme", now=0.0)
    fair.seen("acme", now=0.0)
    assert fair.active(now=0.5) == {"acme"}  # no tenant's share shrinks for it
    assert fair.slot_cap("acme", 2, now=0.5) == 2
