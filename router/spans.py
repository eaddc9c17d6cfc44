"""What a request's root span says of the door it came through, by the OpenTelemetry
semantic conventions: RPC (``rpc.system``, ``rpc.service``, ``rpc.method``, span named
``service/method``) for the gRPC doors, HTTP (``http.request.method``, ``http.route``, span
named ``METHOD route``) for the HTTP doors, ``server.address``/``server.port``, and the
status rule both share: only the server's own faults mark a span ERROR, never what the
caller did (a bad input, an unknown model, a quota refusal)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

import grpc
from google.rpc import status_pb2

from ferryman.errors import SERVER_FAULTS
from ferryman_server.router.doors.http.errors import http_status

"""The codes the gRPC conventions count as a server span's error (HTTP's 5xx map from these)."""


class Protocol(StrEnum):
    """The front door a request came through (metrics label, span attribute, log field)."""

    FERRYMAN = "ferryman"
    OIP_GRPC = "oip-grpc"
    OIP_REST = "oip-rest"
    OPENAI = "openai"


@dataclass(frozen=True)
class Door:
    """One way in: its protocol, the root span's name and its convention attributes."""

    protocol: Protocol
    span_name: str
    attributes: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    http: bool = False


def grpc_door(protocol: Protocol, service: str, method: str) -> Door:
    return Door(
        protocol,
        f"{service}/{method}",
        MappingProxyType({"rpc.system": "grpc", "rpc.service": service, "rpc.method": method}),
    )


def http_door(protocol: Protocol, method: str, route: str, **extra: str) -> Door:
    attributes = {"http.request.method": method, "http.route": route, **extra}
    return Door(protocol, f"{method} {route}", MappingProxyType(attributes), http=True)


def server_address(listen: str) -> dict[str, str | int]:
    """``server.address`` and ``server.port`` of a listen address (host:port)."""
    host, _, port = listen.rpartition(":")
    return {
        "server.address": host.strip("[]") or "0.0.0.0",
        "server.port": int(port) if port.isdigit() else 0,
    }


def is_server_fault(code: grpc.StatusCode) -> bool:
    return code in SERVER_FAULTS


def failure_attributes(door: Door, status: status_pb2.Status) -> dict[str, int]:
    """The convention's status attribute of a failed request: its gRPC code, or the HTTP
    status an HTTP door answers it with."""
    if door.http:
        return {"http.response.status_code": http_status(status)}
    return {"rpc.grpc.status_code": status.code}
