"""Batcher admission as pure decisions: every refusal, its code, reason and retry hint."""

from __future__ import annotations

import grpc
import pytest

from ferryman.errors import Reason
from ferryman_server.batcher.admission import QueueLimits, Refusal, check_item, check_queue

LIMITS = QueueLimits(max_queue_rows=100, max_total_rows=150, retry_after_min_s=0.05, retry_after_max_s=10.0)
NOW = 100.0
UNAVAILABLE, EXHAUSTED = grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED


def item(**overrides: object) -> Reason | None:
    args: dict[str, object] = {
        "now": NOW,
        "deadline": NOW + 1.0,
        "accepting": True,
        "version_key": "m:1",
        "max_rows": 8,
        "rows": 2,
        "unserved": lambda: None,
    }
    refusal = check_item(**{**args, **overrides})  # type: ignore[arg-type]
    return None if refusal is None else refusal.reason


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({}, None),
        ({"deadline": NOW}, Reason.DEADLINE),
        ({"accepting": False}, Reason.DRAINING),
        ({"max_rows": None}, Reason.UNKNOWN_VERSION),
        ({"rows": 0}, Reason.INVALID_INPUT),
        ({"rows": 9}, Reason.INVALID_INPUT),
        (
            {"unserved": lambda: Refusal(grpc.StatusCode.UNAVAILABLE, Reason.NO_REPLICA, "m:1 failed")},
            Reason.NO_REPLICA,
        ),
        (
            {"unserved": lambda: Refusal(grpc.StatusCode.RESOURCE_EXHAUSTED, Reason.NO_ROOM, "no room")},
            Reason.NO_ROOM,
        ),
        # Order: a late item is refused as late even when everything else is wrong too.
        ({"deadline": NOW - 1, "accepting": False, "max_rows": None}, Reason.DEADLINE),
    ],
)
def test_item_checks(overrides: dict[str, object], reason: Reason | None) -> None:
    assert item(**overrides) == reason


def test_bad_rows_name_the_field() -> None:
    refusal = check_item(NOW, NOW + 1, True, "m:1", 8, 9, lambda: None)
    assert refusal is not None and refusal.code == grpc.StatusCode.INVALID_ARGUMENT
    assert refusal.violations == [("inputs", "rows must be 1..8")]


def test_an_item_that_would_be_late_is_refused_with_the_expected_wait() -> None:
    refusal = check_queue(NOW, NOW + 0.05, "m:1", 1, 0.2, 4, 4, 10.0, LIMITS)
    assert refusal is not None and refusal.reason == Reason.OVERLOADED
    assert refusal.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert refusal.expected_s == 0.2 and refusal.retry_after_s == 0.2
    assert check_queue(NOW, NOW + 0.5, "m:1", 1, 0.2, 4, 4, 10.0, LIMITS) is None


def test_a_deadline_even_an_idle_batcher_cannot_meet_is_its_own_fault() -> None:
    refusal = check_queue(NOW, NOW + 0.001, "m:1", 1, 0.004, 0, 0, 10.0, LIMITS)
    assert refusal is not None and refusal.code == grpc.StatusCode.DEADLINE_EXCEEDED
    assert refusal.reason == Reason.DEADLINE_TOO_SHORT and refusal.retry_after_s is None


def test_full_queues_retry_after_their_drain_time_within_bounds() -> None:
    full = check_queue(NOW, NOW + 1, "m:1", 1, 0.01, 100, 100, 50.0, LIMITS)
    assert full is not None and full.reason == Reason.QUEUE_FULL and full.retry_after_s == 2.0
    batcher_full = check_queue(NOW, NOW + 1, "m:1", 1, 0.01, 10, 150, 50.0, LIMITS)
    assert batcher_full is not None and batcher_full.reason == Reason.QUEUE_FULL
    stalled = check_queue(NOW, NOW + 1, "m:1", 1, 0.01, 100, 100, 0.0, LIMITS)
    assert stalled is not None and stalled.retry_after_s == LIMITS.retry_after_max_s
    quick = check_queue(NOW, NOW + 1, "m:1", 1, 0.01, 100, 100, 1e9, LIMITS)
    assert quick is not None and quick.retry_after_s == LIMITS.retry_after_min_s


def test_nothing_is_asked_of_the_fleet_for_an_item_refused_for_anything_else() -> None:
    """``unserved`` may start a load on demand: a late, malformed or unknown item never
    gets that far, so it cannot make a node load (and evict) for free."""
    asked: list[str] = []

    def unserved() -> None:
        asked.append("m:1")

    for late, rows, max_rows in ((True, 2, 8), (False, 0, 8), (False, 9, 8), (False, 2, None)):
        deadline = NOW - 1 if late else NOW + 1
        assert check_item(NOW, deadline, True, "m:1", max_rows, rows, unserved) is not None
    assert asked == []
    assert check_item(NOW, NOW + 1, True, "m:1", 8, 2, unserved) is None
    assert asked == ["m:1"]
