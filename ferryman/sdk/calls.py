"""What both clients share: request building, the endpoint and key, retry delays, stream answers,
credentials and channel options."""

from __future__ import annotations

import os
import random
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeGuard, TypeVar

import grpc

from ferryman.priorities import PRIORITIES
from ferryman.sdk.convert import to_inputs
from ferryman.sdk.errors import (
    AnswerNotKept,
    DeadlineExceeded,
    FerrymanError,
    InvalidOption,
    QuotaExceeded,
    RetryableError,
    Unavailable,
    from_status,
)
from ferryman.sdk.prediction import Prediction
from ferryman.v1 import common_pb2, inference_pb2

DEFAULT_TIMEOUT_S = 30.0
DEFAULT_MAX_TOKENS = 256
"""What ``generate`` and ``chat`` ask for when the caller names no ``max_tokens``."""
DEFAULT_TARGET = "127.0.0.1:7001"
TARGET_ENV = "FERRYMAN_TARGET"
API_KEY_ENV = "FERRYMAN_API_KEY"
DEFAULT_RETRIES = 10
"""Retries of a retryable failure; with BACKOFF_S doubling to MAX_BACKOFF_S (jittered)
they span 11-22 s, inside the default 30 s deadline: enough to ride out a router restart
and the channel's reconnect backoff after it."""
BACKOFF_S = 0.1
MAX_BACKOFF_S = 4.0
RECONNECT_BACKOFF_MS = (100, 1000)
"""gRPC's reconnect backoff, first and longest (its defaults, 1 s and 120 s, keep a channel
failing fast for seconds after its server is back: retries would find it still down). A
call's retry after its router was unreachable waits for the channel to connect (see
``unreachable``), so it is sent within this longest backoff of the router listening again."""
KEEPALIVE_S = 30.0
"""While a call is open the channel pings the router this often, and drops a connection
whose ping goes unanswered for KEEPALIVE_TIMEOUT_S: a call on a dead connection (a router's
machine gone, a NAT that forgot it) fails UNAVAILABLE and is retried, instead of hanging."""
KEEPALIVE_TIMEOUT_S = 10.0
MIN_KEEPALIVE_S = 5.0
"""The fastest pings Ferryman's servers accept (more often, they close the connection)."""
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
JITTER = 0.5
"""Backoff sleeps a random 50-100% of the step, so clients refused together do not retry together."""

Metadata = Sequence[tuple[str, str]]


def build_request(
    model: str,
    inputs: Any,
    info: inference_pb2.ModelInfo | None,
    *,
    user: str | None,
    priority: str | int | None,
    version: str | None,
    parameters: Mapping[str, str] | None,
    request_id: str | None,
    spill_to_job: bool = False,
    generated_id: bool = False,
) -> inference_pb2.PredictRequest:
    """The request; ``generated_id``: ``request_id`` is the client's own (the application
    chose none), which the router binds but keeps no answer for (as with no id at all)."""
    level = priority_level(priority)
    return inference_pb2.PredictRequest(
        request_id=request_id or uuid.uuid4().hex,
        generated_request_id=generated_id or not request_id,
        model=model,
        version=version or "",
        inputs=to_inputs(inputs, info, version or ""),
        parameters=dict(parameters or {}),
        user=user or "",
        priority=level,  # type: ignore[arg-type]
        spill_to_job=spill_to_job,
    )


def priority_level(priority: str | int | None) -> int:
    """The wire priority of a name ("low", "normal", "high") or number; unknown ones are errors."""
    if priority is None:
        return 0
    if isinstance(priority, str):
        if priority.lower() not in PRIORITIES:
            raise InvalidOption(
                "priority", f"unknown priority {priority[:64]!r}: one of {', '.join(PRIORITIES)}"
            )
        return int(PRIORITIES[priority.lower()])
    if priority not in common_pb2.Priority.values():
        raise InvalidOption("priority", f"unknown priority {priority!r}: one of {', '.join(PRIORITIES)}")
    return priority


def endpoint(target: str | None, api_key: str | None) -> tuple[str, str]:
    """Target and key as given, else from FERRYMAN_TARGET / FERRYMAN_API_KEY (as the CLI reads them)."""
    key = api_key or os.environ.get(API_KEY_ENV, "")
    if not key:
        raise ValueError(f"an API key is needed: pass api_key or set {API_KEY_ENV}")
    return target or os.environ.get(TARGET_ENV, DEFAULT_TARGET), key


def out_of_time() -> FerrymanError:
    """The call's time budget is spent (a timeout of 0): fail without sending."""
    return DeadlineExceeded(grpc.StatusCode.DEADLINE_EXCEEDED, "the call's timeout is spent", "DEADLINE")


def tagged(error: FerrymanError, request_id: str) -> FerrymanError:
    """``error`` marked with the request id it was sent under."""
    error.request_id = request_id
    return error


def retry_delay(error: FerrymanError, attempt: int) -> float | None:
    """Seconds to wait before retrying, or None when the error is final."""
    if not isinstance(error, RetryableError) or isinstance(error, QuotaExceeded):
        return None
    if error.retry_after is not None:
        return error.retry_after
    return float(min(MAX_BACKOFF_S, BACKOFF_S * 2**attempt) * random.uniform(1 - JITTER, 1))


def retry_or_raise(error: FerrymanError, attempt: int, retries: int, now: float, deadline: float) -> float:
    """Seconds to wait before attempt ``attempt + 1``; raises ``error`` when it is final, the
    retries are spent, or the wait would pass the call's deadline."""
    delay = retry_delay(error, attempt)
    if delay is None or attempt == retries or now + delay >= deadline:
        raise error from None  # the gRPC error it was made from says nothing more
    return delay


Renameable = TypeVar("Renameable", inference_pb2.PredictRequest, inference_pb2.GenerateRequest)


def unreachable(error: FerrymanError) -> bool:
    """Whether ``error`` is gRPC's own UNAVAILABLE: no router answered (a router's refusals
    carry a reason). The next attempt then waits for the channel to connect (gRPC's
    ``wait_for_ready``) instead of sleeping a backoff that may outlast the outage."""
    return isinstance(error, Unavailable) and not error.reason and error.code == grpc.StatusCode.UNAVAILABLE


def renamed(request: Renameable | None, error: FerrymanError) -> TypeGuard[Renameable]:
    """Whether ``error`` says an earlier attempt of this call, under the client's own id, was
    answered and the answer lost on its way back (it was not kept): the request then takes a
    new id, to be sent again at once (run and charged again: a call with an id of the
    application's own is answered from the kept answer instead)."""
    if request is None or not request.generated_request_id or not isinstance(error, AnswerNotKept):
        return False
    request.request_id = uuid.uuid4().hex
    return True


def channel_credentials(
    tls: bool | str | Path, credentials: grpc.ChannelCredentials | None
) -> grpc.ChannelCredentials | None:
    """Credentials for the router's channel: given ones, TLS verified against a CA file
    (``tls`` a path) or the system's roots (``tls=True``), or None for plaintext."""
    if credentials is not None or tls is False:
        return credentials
    roots = None if tls is True else Path(tls).expanduser().read_bytes()
    return grpc.ssl_channel_credentials(roots)


def channel_options(keepalive_s: float = KEEPALIVE_S) -> list[tuple[str, int]]:
    timeout_ms = int(min(KEEPALIVE_TIMEOUT_S, keepalive_s) * 1000)
    return [
        ("grpc.keepalive_time_ms", int(keepalive_s * 1000)),
        ("grpc.keepalive_timeout_ms", timeout_ms),
        # What the transport waits for a ping's ack before closing (its default, 60 s, is
        # what a dead connection took to be found with keepalive_timeout alone: measured).
        ("grpc.http2.ping_timeout_ms", timeout_ms),
        # Pings only while calls are open (an idle channel costs the router nothing), and
        # however long a call waits for its next message (a job's watch).
        ("grpc.keepalive_permit_without_calls", 0),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.initial_reconnect_backoff_ms", RECONNECT_BACKOFF_MS[0]),
        ("grpc.min_reconnect_backoff_ms", RECONNECT_BACKOFF_MS[0]),
        ("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MS[1]),
    ]


def call_metadata(base: Metadata, extra: Metadata | None) -> list[tuple[str, str]]:
    """The key plus a call's own metadata (a traceparent, say); the key cannot be overridden."""
    own = [(k, v) for k, v in (extra or ()) if k.lower() != "authorization"]
    return [*base, *own]


def call_timeout(timeout: float | None, default: float) -> float:
    """The call's time budget: ``timeout`` when given (0 means now: the call fails at once
    with DEADLINE_EXCEEDED), else the client's default."""
    if timeout is None:
        return default
    if timeout < 0:
        raise ValueError(f"timeout must be >= 0, got {timeout}")
    return timeout


def needs_schema(inputs: Any) -> bool:
    """Whether encoding ``inputs`` needs the model's schema: all but a mapping of named
    arrays or texts (plain number lists have no dtype; a bare value, no name)."""
    if not isinstance(inputs, Mapping):
        return True
    return any(
        isinstance(v, list | tuple) and not all(isinstance(x, str) for x in v) for v in inputs.values()
    )


def stream_answer(reply: inference_pb2.PredictStreamResponse) -> Prediction | FerrymanError:
    """One answer of a PredictStream: its prediction, or its error tagged with its id."""
    if reply.WhichOneof("result") == "response":
        return Prediction.from_proto(reply.response)
    return tagged(from_status(reply.error), reply.request_id)


STREAM_OPTIONS = frozenset({"user", "priority", "version", "parameters"})


def stream_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """``predict_many``'s per-request options, each of STREAM_OPTIONS (unknown ones refused)."""
    unknown = set(options) - STREAM_OPTIONS
    if unknown:
        raise TypeError(f"unknown options {sorted(unknown)}: one of {sorted(STREAM_OPTIONS)}")
    return {name: options.get(name) for name in STREAM_OPTIONS}


def missing_answer(request_id: str) -> FerrymanError:
    """What a request the stream closed without answering gets."""
    return tagged(
        FerrymanError(grpc.StatusCode.INTERNAL, "the stream ended without an answer", "NO_ANSWER"), request_id
    )
