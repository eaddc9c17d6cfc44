"""The placement policy over fake nodes: where a version goes, what it pushes out, and that
no choice ever overcommits a node."""

from __future__ import annotations

import itertools
import random

from ferryman_server.kernel.placement import Held, NodeRoom, Placement, place, victims

MIB = 1 << 20


def room(name: str, budget_mib: int, *held: Held) -> NodeRoom:
    return NodeRoom(name, budget_mib * MIB, held)


def held(key: str, mib: int, idle_s: float, *, pinned: bool = False, busy: bool = False) -> Held:
    return Held(key, mib * MIB, idle_s, pinned, busy)


def test_a_version_that_fits_evicts_nothing_and_goes_where_most_room_is_left() -> None:
    rooms = [room("n1", 100, held("a:1", 60, 5)), room("n2", 100, held("b:1", 20, 5))]
    assert place(rooms, "c:1", 30 * MIB) == Placement("n2")


def test_equal_room_picks_the_first_name_so_every_batcher_agrees() -> None:
    assert place([room("n2", 100), room("n1", 100)], "c:1", MIB) == Placement("n1")


def test_a_replica_never_lands_beside_another_of_the_same_version() -> None:
    rooms = [room("n1", 100, held("a:1", 10, 0)), room("n2", 100, held("b:1", 95, 0, busy=True))]
    assert place(rooms, "a:1", 10 * MIB) is None
    rooms.append(room("n3", 100))
    assert place(rooms, "a:1", 10 * MIB) == Placement("n3")


def test_the_fleets_least_recently_used_version_is_the_one_evicted() -> None:
    rooms = [room("n1", 100, held("a:1", 80, idle_s=30)), room("n2", 100, held("b:1", 80, idle_s=90))]
    assert place(rooms, "c:1", 80 * MIB) == Placement("n2", ("b:1",))
    rooms = [room("n1", 100, held("a:1", 80, idle_s=300)), room("n2", 100, held("b:1", 80, idle_s=90))]
    assert place(rooms, "c:1", 80 * MIB) == Placement("n1", ("a:1",))


def test_pinned_and_busy_versions_are_never_evicted() -> None:
    rooms = [
        room("n1", 100, held("a:1", 80, 999, pinned=True)),
        room("n2", 100, held("b:1", 80, 999, busy=True)),
    ]
    assert place(rooms, "c:1", 80 * MIB) is None
    rooms.append(room("n3", 100, held("d:1", 80, 1)))
    assert place(rooms, "c:1", 80 * MIB) == Placement("n3", ("d:1",))


def test_a_node_evicts_as_few_as_make_room_least_recently_used_first() -> None:
    node = room("n1", 100, held("a:1", 30, 10), held("b:1", 30, 50), held("c:1", 30, 20))
    assert victims(node, 10 * MIB) == ()
    assert victims(node, 30 * MIB) == ("b:1",)
    assert victims(node, 50 * MIB) == ("b:1", "c:1")
    assert victims(node, 101 * MIB) is None, "more than the whole budget never fits"


def test_what_is_bigger_than_any_node_is_placed_nowhere() -> None:
    assert place([room("n1", 100), room("n2", 50)], "big:1", 101 * MIB) is None


def test_no_choice_overcommits_a_node() -> None:
    rng = random.Random(7)
    for _ in range(500):
        rooms = []
        for n in range(rng.randint(1, 4)):
            budget = rng.randint(50, 200)
            versions, used = [], 0
            for v in itertools.count():
                mib = rng.randint(5, 80)
                if used + mib > budget:
                    break
                used += mib
                versions.append(
                    held(
                        f"m{n}:{v}",
                        mib,
                        rng.uniform(0, 100),
                        pinned=rng.random() < 0.2,
                        busy=rng.random() < 0.2,
                    )
                )
            rooms.append(room(f"n{n}", budget, *versions))
        need = rng.randint(1, 150) * MIB
        decision = place(rooms, "new:1", need)
        if decision is None:
            assert all(victims(r, need) is None for r in rooms)
            continue
        target = next(r for r in rooms if r.name == decision.node)
        gone = {h.key: h for h in target.held if h.key in decision.evict}
        assert all(h.evictable for h in gone.values())
        assert target.used - sum(h.bytes for h in gone.values()) + need <= target.budget
