"""How a request fails inside the router: one ``RequestFailed`` carrying the
google.rpc.Status every door answers with (each converts it to its own protocol)."""

from __future__ import annotations

import logging

import grpc
from google.rpc import status_pb2

from ferryman.errors import CallFailed, Reason, make_status
from ferryman_server.kernel.logs import incident, internal_message
from ferryman_server.router.bounds import clip
from ferryman_server.router.routing import Choice


class RequestFailed(CallFailed):
    """The request ends with this google.rpc.Status (code, message, details), as every door
    answers it: the failure of the router's layer, a ``CallFailed`` like those of the ports
    below it. ``served``: the version that ran it, when it failed there (its metrics and
    canary analysis count the failure against that version, not against the alias)."""

    def __init__(self, status: status_pb2.Status, served: Choice | None = None) -> None:
        super().__init__(status)
        self.served = served


def fail(code: grpc.StatusCode, message: str, reason: str, **details: object) -> RequestFailed:
    return RequestFailed(make_status(code, message, reason=reason, **details))  # type: ignore[arg-type]


def internal(logger: logging.Logger, what: str) -> status_pb2.Status:
    """The status a tenant gets for a failure that is ours (call it while handling the
    exception): INTERNAL with a correlation id, the exception itself only in the log."""
    return make_status(
        grpc.StatusCode.INTERNAL, internal_message(incident(logger, what)), reason=Reason.INTERNAL
    )


def unknown_model(model: str) -> RequestFailed:
    """Unknown and forbidden models answer alike, so model names do not leak across tenants."""
    return fail(grpc.StatusCode.NOT_FOUND, f"unknown model {clip(model)!r}", Reason.UNKNOWN_MODEL)


def invalid(field: str, description: str) -> RequestFailed:
    """A request the client must fix: INVALID_ARGUMENT naming the field (BadRequest)."""
    return fail(
        grpc.StatusCode.INVALID_ARGUMENT,
        f"{field}: {description}",
        Reason.INVALID_REQUEST,
        violations=[(field, description)],
    )
