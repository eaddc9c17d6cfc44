"""The root span of a request through an HTTP door, by the OpenTelemetry HTTP conventions:
``http.request.method`` and ``http.route``, the span named ``METHOD route``, and a failure's
``http.response.status_code`` as the door answers it."""

from __future__ import annotations

from types import MappingProxyType

from google.rpc import status_pb2

from ferryman_server.router.doors.http.errors import http_status
from ferryman_server.router.spans import Door, Protocol

HTTP_OK = 200


def http_failure(status: status_pb2.Status) -> dict[str, int]:
    return {"http.response.status_code": http_status(status)}


def http_door(protocol: Protocol, method: str, route: str, **extra: str) -> Door:
    attributes = {"http.request.method": method, "http.route": route, **extra}
    return Door(
        protocol,
        f"{method} {route}",
        MappingProxyType(attributes),
        http_failure,
        MappingProxyType({"http.response.status_code": HTTP_OK}),
        http=True,
    )
