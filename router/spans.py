"""What a request's root span says of the door it came through, by the OpenTelemetry
semantic conventions: RPC (``rpc.system``, ``rpc.service``, ``rpc.method``, span named
``service/method``) for the gRPC doors, and what each HTTP door says of itself
(``router/doors/http/spans.py``: ``http.request.method``, ``http.route``, span named
``METHOD route``, its HTTP status); ``server.address``/``server.port``, and the status rule
every door shares: only the server's own faults mark a span ERROR, never what the caller did
(a bad input, an unknown model, a quota refusal). The core knows no wire format: a door
hands its span the attributes of a failure as its own protocol answers it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

import grpc
from google.rpc import status_pb2

from ferryman.errors import SERVER_FAULTS


class Protocol(StrEnum):
    """The front door a request came through (metrics label, span attribute, log field)."""

    FERRYMAN = "ferryman"
    OIP_GRPC = "oip-grpc"
    OIP_REST = "oip-rest"
    OPENAI = "openai"


def rpc_failure(status: status_pb2.Status) -> dict[str, int]:
    """A failed RPC's convention attribute: its gRPC code."""
    return {"rpc.grpc.status_code": status.code}


@dataclass(frozen=True)
class Door:
    """One way in: its protocol, the root span's name, its convention attributes, and the
    attributes a failure adds (the status as the door's protocol answers it)."""

    protocol: Protocol
    span_name: str
    attributes: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    failure: Callable[[status_pb2.Status], dict[str, int]] = rpc_failure
    success: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({"rpc.grpc.status_code": 0}))
    """The status attribute of an answered request."""
    http: bool = False
    """It listens on the HTTP port (``server.address`` and ``server.port`` are that port's)."""


def grpc_door(protocol: Protocol, service: str, method: str) -> Door:
    return Door(
        protocol,
        f"{service}/{method}",
        MappingProxyType({"rpc.system": "grpc", "rpc.service": service, "rpc.method": method}),
    )


def server_address(listen: str) -> dict[str, str | int]:
    """``server.address`` and ``server.port`` of a listen address (host:port)."""
    host, _, port = listen.rpartition(":")
    return {
        "server.address": host.strip("[]") or "0.0.0.0",
        "server.port": int(port) if port.isdigit() else 0,
    }


def is_server_fault(code: grpc.StatusCode) -> bool:
    """The codes the gRPC conventions count as a server span's error (HTTP's 5xx map from these)."""
    return code in SERVER_FAULTS
