"""What the Overview calls wrong right now: pure."""

from __future__ import annotations

from ferryman_server.admin_ui.views.wrong import Findings, problems


def test_nothing_found_is_nothing_wrong() -> None:
    assert problems(Findings([], [], [], {"acme": 0.0}, 0)) == []


def test_each_kind_of_trouble_is_named_worst_refusals_first() -> None:
    found = Findings(
        alerts=[("FerrymanNodeDown", "node-2 is down")],
        nodes_not_ready=[("node-2", "no heartbeat for 30 s")],
        breakers_open=["node-2"],
        refused={"acme": 0.5, "globex": 2.0, "quiet": 0.0},
        dead_letters_last_hour=3,
    )
    assert [p.what for p in problems(found)] == [
        "alert FerrymanNodeDown is firing",
        "node node-2 is not ready",
        "breaker open for node node-2",
        "tenant globex is being refused",
        "tenant acme is being refused",
        "3 dead letters in the last hour",
    ]
