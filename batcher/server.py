"""The batcher process: serve Submit, keep replicas fresh, drain on SIGTERM."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from batcher.dead_letters import DeadLetterSink
from batcher.dispatcher import Dispatcher
from batcher.metrics import BatcherMetrics
from batcher.replicas import ReplicaDirectory
from batcher.service import BatcherService
from batcher.servicer import BatcherServicer
from batcher.settings import BatcherSettings
from ferryman.config import CommonSettings
from ferryman.runtime import ServiceSpec, run_service
from ferryman.v1 import batcher_pb2, batcher_pb2_grpc
from registry.db import make_engine
from registry.reader import RegistryReader
from registry.writer import RegistryWriter

log = logging.getLogger("ferryman.batcher")
BATCHER_SERVICE = batcher_pb2.DESCRIPTOR.services_by_name["Batcher"].full_name


async def serve_batcher(
    settings: BatcherSettings,
    common: CommonSettings,
    stop: asyncio.Event | None = None,
    on_ready: Callable[[str], None] | None = None,
) -> int:
    """Run a batcher until SIGTERM/SIGINT (or, when given, until ``stop`` is set)."""
    metrics = BatcherMetrics()
    spec = ServiceSpec(
        name="batcher",
        listen=settings.listen,
        services=[BATCHER_SERVICE],
        max_message_bytes=settings.max_message_bytes,
        internal=True,
        metrics_listen=settings.metrics_listen,
        metrics=metrics.registry,
    )
    async with run_service(spec, common, stop) as rt:
        engine = make_engine(common.resolved_database_url())
        rt.on_close(engine.dispose)
        directory = ReplicaDirectory(settings, RegistryReader(engine), metrics, rt.security)
        rt.on_close(directory.close)
        dead_letters = DeadLetterSink(RegistryWriter(engine, actor="batcher"), settings.dead_letters_per_s)
        service = BatcherService(
            settings,
            directory,
            metrics,
            lambda finish: Dispatcher(settings, directory, metrics, dead_letters, finish),
        )
        batcher_pb2_grpc.add_BatcherServicer_to_server(BatcherServicer(service), rt.server)
        refresher_stop = asyncio.Event()
        refresher = asyncio.create_task(directory.run(refresher_stop))
        try:
            await asyncio.wait_for(directory.refreshed.wait(), timeout=settings.heartbeat_timeout_s)
        except TimeoutError:
            log.warning("registry not readable yet; starting without replicas")
        await rt.serve(on_ready)
        try:
            await asyncio.wait_for(service.drain(), timeout=settings.drain_timeout_s)
        except TimeoutError:
            log.warning("drain timed out with work still queued")
        await rt.server.stop(grace=1.0)
        await service.close()
        await dead_letters.flush()
        refresher_stop.set()
        await refresher
    return 0
