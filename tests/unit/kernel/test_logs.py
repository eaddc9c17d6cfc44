"""Throttled warnings (no sockets): one line per period and cause, the next one counting
what was held back; every line bounded, whatever a tenant put in its fields or message."""

from __future__ import annotations

import logging
import sys

import pytest

from ferryman_server.kernel.logs import (
    MAX_EXCEPTION_CHARS,
    MAX_FIELD_CHARS,
    MAX_MESSAGE_CHARS,
    REQUEST_LOGGER,
    JsonFormatter,
    Throttled,
    log_request,
)


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


def test_a_megabyte_id_adds_a_few_kilobytes_to_the_log() -> None:
    huge = "x" * 1_000_000
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger(REQUEST_LOGGER)
    handler, level = Keep(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        log_request("acme", huge, "1", huge, "INVALID_ARGUMENT", 0.001)  # the router's line
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    formatter = JsonFormatter()
    (request,) = records
    line = formatter.format(request)
    assert len(line) < 2 * MAX_FIELD_CHARS + 1024
    assert '"request_id": "xxx' in line and "999744 more characters" in line
    message = logging.LogRecord("t", logging.ERROR, "f", 1, "request %s failed", (huge,), None)
    assert len(formatter.format(message)) < MAX_MESSAGE_CHARS + 512
    try:
        raise ValueError(huge)
    except ValueError:
        failed = logging.LogRecord("t", logging.ERROR, "f", 1, "boom", (), sys.exc_info())
    assert len(formatter.format(failed)) < MAX_EXCEPTION_CHARS + 512
