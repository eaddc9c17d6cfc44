"""Throttled warnings (no sockets): one line per period and cause, the next one counting
what was held back."""

from __future__ import annotations

import logging

import pytest

from ferryman_kernel.logs import Throttled


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_repeated_warning_is_logged_once_per_period_with_the_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    throttled = Throttled(logging.getLogger("test.throttled"), 10.0, clock)
    with caplog.at_level(logging.WARNING, "test.throttled"):
        for i in range(3000):  # a backend outage: one failure per request, every 4 ms for 12 s
            clock.now = 100.0 + i * 0.004
            throttled.warning("down", "backend down: %s", "refused")
        throttled.warning("other", "another cause")
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "backend down: refused",
        "backend down: refused (2499 more like it in the last 10 s)",
        "another cause",  # each cause has its own period
    ]
