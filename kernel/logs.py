"""JSON-lines logging with trace and span ids, for every service."""

from __future__ import annotations

import json
import logging
import math
import secrets
import time
from collections.abc import Callable

from opentelemetry import trace

REQUEST_LOGGER = "ferryman.requests"
MAX_MESSAGE_CHARS = 2048
"""Longest message one log line keeps (a tenant's text can reach it through an argument)."""
MAX_FIELD_CHARS = 256
"""Longest text field (a request id, a model name) one log line keeps."""
MAX_EXCEPTION_CHARS = 16384
"""Longest traceback one log line keeps (its exception's message may be a tenant's text)."""


def bounded(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text) - limit} more characters)"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, trace/span ids, extras."""

    def format(self, record: logging.LogRecord) -> str:
        context = trace.get_current_span().get_span_context()
        line: dict[str, object] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": bounded(record.getMessage(), MAX_MESSAGE_CHARS),
        }
        if context.is_valid:
            line["trace_id"] = f"{context.trace_id:032x}"
            line["span_id"] = f"{context.span_id:016x}"
        for name, value in getattr(record, "fields", {}).items():
            line[name] = bounded(value, MAX_FIELD_CHARS) if isinstance(value, str) else value
        if record.exc_info:
            line["exception"] = bounded(self.formatException(record.exc_info), MAX_EXCEPTION_CHARS)
        return json.dumps(line, default=str)


def configure_logging(level: str) -> None:
    """JSON lines on stderr for the whole process."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def log_request(tenant: str, model: str, version: str, request_id: str, code: str, seconds: float) -> None:
    """The router's one line per request (inside the request span, so it carries its trace id)."""
    logging.getLogger(REQUEST_LOGGER).info(
        "request",
        extra={
            "fields": {
                "tenant": tenant,
                "model": model,
                "version": version,
                "request_id": request_id,
                "code": code,
                "latency_ms": round(seconds * 1000, 3),
            }
        },
    )


def incident(logger: logging.Logger, what: str) -> str:
    """Log the exception being handled with a fresh correlation id, and return the id: what
    a caller is told of a failure that is ours (never the exception's text, which can hold
    paths, addresses or another tenant's data), and what finds this log line."""
    correlation = secrets.token_hex(8)
    logger.exception("%s (correlation id %s)", what, correlation)
    return correlation


def internal_message(correlation: str) -> str:
    return f"internal error (correlation id {correlation})"


class Throttled:
    """Warnings that repeat for one cause (a backend down: one per request) logged at most
    once per ``period_s`` each, the next line saying how many were held back. Keys are the
    caller's fixed names for its conditions, so the table stays small."""

    def __init__(
        self, logger: logging.Logger, period_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._logger = logger
        self._period_s = period_s
        self._clock = clock
        self._seen: dict[str, tuple[float, int]] = {}

    def warning(self, key: str, message: str, *args: object) -> None:
        now = self._clock()
        last, held = self._seen.get(key, (-math.inf, 0))
        if now - last < self._period_s:
            self._seen[key] = (last, held + 1)
            return
        self._seen[key] = (now, 0)
        if held:
            message += f" ({held} more like it in the last {self._period_s:g} s)"
        self._logger.warning(message, *args)
