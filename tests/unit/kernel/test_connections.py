"""The connection guard's policy: deadlines by phase, and who is shed when a port or a peer
is full (the longest-waiting unserved connection, never one being served)."""

from __future__ import annotations

import pytest

from ferryman_server.kernel.connections import ConnectionGuard, GuardLimits, Phase

LIMITS = GuardLimits(
    max_connections=4, max_per_peer=3, header_timeout_s=10, body_timeout_s=60, max_header_bytes=1024
)


def guard() -> ConnectionGuard[str]:
    return ConnectionGuard(LIMITS)


def test_each_phase_has_its_deadline_and_serving_none() -> None:
    g = guard()
    assert g.opened("a", "p1").shed == []
    assert g.entered("a", Phase.BODY) == 60
    assert g.entered("a", Phase.SERVING) is None
    assert g.entered("a", Phase.WAITING) == 10  # keep-alive: the next request's headers
    with pytest.raises(ValueError, match="waiting to serving"):
        g.entered("a", Phase.SERVING)


def test_a_full_port_sheds_the_longest_waiting_then_the_longest_reading() -> None:
    g = guard()
    for conn, peer in (("a", "p1"), ("b", "p2"), ("c", "p3"), ("d", "p4")):
        g.opened(conn, peer)
    g.entered("a", Phase.BODY)  # a sends its body: shed after every waiting one
    g.entered("b", Phase.BODY)
    g.entered("b", Phase.SERVING)  # b is served: never shed
    assert g.opened("e", "p5").shed == ["c"]
    assert g.opened("f", "p6").shed == ["d"]
    assert g.opened("g", "p7").shed == ["e"]
    g.entered("f", Phase.BODY)
    g.entered("f", Phase.SERVING)
    g.entered("g", Phase.BODY)
    g.entered("g", Phase.SERVING)
    assert g.opened("h", "p8").shed == ["a"]  # no one waits: the longest body goes
    g.entered("h", Phase.BODY)
    g.entered("h", Phase.SERVING)
    full = g.opened("i", "p9")
    assert full.shed == [] and not full.refused and len(g) == 5  # all served: i gets a 503


def test_an_answered_connection_waits_at_the_back() -> None:
    g = guard()
    for conn, peer in (("a", "p1"), ("b", "p2"), ("c", "p3"), ("d", "p4")):
        g.opened(conn, peer)
    for phase in (Phase.BODY, Phase.SERVING, Phase.WAITING):
        g.entered("a", phase)  # a was answered just now: it has waited least
    assert g.opened("e", "p5").shed == ["b"]


def test_a_peer_past_its_bound_sheds_its_own_or_is_refused() -> None:
    g = guard()
    for conn in ("a", "b", "c"):
        g.opened(conn, "attacker")
    g.opened("x", "other")
    assert g.opened("d", "attacker").shed == ["a"], "its own longest-waiting, not another peer's"
    for conn in ("b", "c", "d"):
        g.entered(conn, Phase.BODY)
        g.entered(conn, Phase.SERVING)
    refused = g.opened("e", "attacker")
    assert refused.refused and refused.shed == [] and len(g) == 4
    assert not g.opened("y", "other").refused


def test_forgetting_is_idempotent_and_frees_the_peers_place() -> None:
    g = guard()
    for conn in ("a", "b", "c"):
        g.opened(conn, "p")
    g.closed("a")
    g.closed("a")
    assert g.entered("a", Phase.BODY) is None, "a shed connection has no phase left"
    assert g.opened("d", "p").shed == [] and len(g) == 3
