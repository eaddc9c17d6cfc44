"""What every Ferryman gRPC server has: grpc.aio, health, reflection, message limits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

# Public as grpc_health.v1.health.aio; imported by module path so type checkers see it.
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection

from ferryman_server.kernel.security import NO_REUSEPORT, REUSEPORT

# Servicer methods take the request/response-typed context; our shells need no more than Any.
ServicerContext = grpc.aio.ServicerContext[Any, Any]

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def channel_options(max_message_bytes: int) -> list[tuple[str, int]]:
    """Message size limits, for servers and the channels that talk to them."""
    return [
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
    ]


def create_server(
    service_names: Sequence[str],
    max_message_bytes: int,
    interceptors: Sequence[grpc.aio.ServerInterceptor[Any, Any]] = (),
    options: Sequence[tuple[str, int]] = (),
    reuse_port: bool = False,
    max_calls: int = 0,
) -> tuple[grpc.aio.Server, HealthServicer]:
    """A grpc.aio server with grpc.health.v1 and reflection for ``service_names`` added.

    Reflection lists exactly ``service_names`` (and health): a server hosting internal
    and public services on different ports lists each port's own. The caller registers
    its own servicers, binds a port (``ferryman_server.kernel.security.bind``) and starts it.
    ``reuse_port``: share the port with other processes (a router's workers, deliberately);
    otherwise a second process cannot bind it and silently take a share of the connections.
    ``max_calls``: calls in progress past which gRPC itself refuses a new one
    (RESOURCE_EXHAUSTED) before it is read or any of our code runs; 0: no limit.
    """
    server = grpc.aio.server(
        options=[*channel_options(max_message_bytes), REUSEPORT if reuse_port else NO_REUSEPORT, *options],
        interceptors=list(interceptors),
        maximum_concurrent_rpcs=max_calls or None,
    )
    health_servicer = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    names = [*service_names, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name]
    reflection.enable_server_reflection([*names, reflection.SERVICE_NAME], server)
    return server, health_servicer


async def set_health(
    health: HealthServicer, service_names: Sequence[str], status: health_pb2.HealthCheckResponse.ServingStatus
) -> None:
    """Report ``status`` for the server as a whole ("") and for each service it hosts."""
    for name in ("", *service_names):
        await health.set(name, status)
