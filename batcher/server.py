"""The batcher process: serve Submit, keep replicas fresh, drain on SIGTERM."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ferryman.v1 import batcher_pb2, batcher_pb2_grpc
from ferryman_server.batcher.host import BatcherHost
from ferryman_server.batcher.metrics import BatcherMetrics
from ferryman_server.batcher.servicer import BatcherServicer
from ferryman_server.batcher.settings import BatcherSettings
from ferryman_server.kernel.config import CommonSettings
from ferryman_server.kernel.runtime import ServiceSpec, run_service

BATCHER_SERVICE = batcher_pb2.DESCRIPTOR.services_by_name["Batcher"].full_name


async def serve_batcher(
    settings: BatcherSettings,
    common: CommonSettings,
    stop: asyncio.Event | None = None,
    on_ready: Callable[[str], None] | None = None,
) -> int:
    """Run a batcher until SIGTERM/SIGINT (or, when given, until ``stop`` is set)."""
    metrics = BatcherMetrics()
    spec = ServiceSpec.of("batcher", settings, [BATCHER_SERVICE], metrics.registry)
    async with run_service(spec, common, stop) as rt:
        host = BatcherHost(settings, common, metrics)
        servicer = BatcherServicer(host.service, host.generation, settings.default_timeout_s)
        batcher_pb2_grpc.add_BatcherServicer_to_server(servicer, rt.server)
        await host.start()
        await rt.serve(on_ready)
        await host.drain()
        await rt.stop_serving()
        await host.stop()
    return 0
