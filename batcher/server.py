"""The batcher process: serve Submit, keep replicas fresh, drain on SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable

from batcher.dead_letters import DeadLetterSink
from batcher.dispatcher import Dispatcher
from batcher.metrics import BatcherMetrics
from batcher.replicas import ReplicaDirectory
from batcher.service import BatcherService
from batcher.servicer import BatcherServicer
from batcher.settings import BatcherSettings
from ferryman.config import CommonSettings
from ferryman.metrics_http import serve_metrics
from ferryman.security import ServiceTokenInterceptor, bind
from ferryman.serving import NOT_SERVING, SERVING, create_server, set_health
from ferryman.telemetry import setup_tracing
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
    setup_tracing("batcher")
    engine = make_engine(common.resolved_database_url())
    security = common.security()
    metrics = BatcherMetrics()
    directory = ReplicaDirectory(settings, RegistryReader(engine), metrics, security)
    dead_letters = DeadLetterSink(RegistryWriter(engine, actor="batcher"), settings.dead_letters_per_s)
    service = BatcherService(
        settings,
        directory,
        metrics,
        lambda finish: Dispatcher(settings, directory, metrics, dead_letters, finish),
    )
    server, health_servicer = create_server(
        [BATCHER_SERVICE], settings.max_message_bytes, [ServiceTokenInterceptor(security.token)]
    )
    batcher_pb2_grpc.add_BatcherServicer_to_server(BatcherServicer(service), server)
    port = bind(server, settings.listen, security, internal=True)
    address = f"{settings.listen.rsplit(':', 1)[0]}:{port}"
    metrics_server = serve_metrics(settings.metrics_listen, metrics.registry)

    if stop is None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
    refresher_stop = asyncio.Event()
    refresher = asyncio.create_task(directory.run(refresher_stop))
    try:
        await asyncio.wait_for(directory.refreshed.wait(), timeout=settings.heartbeat_timeout_s)
    except TimeoutError:
        log.warning("registry not readable yet; starting without replicas")
    await server.start()
    await set_health(health_servicer, [BATCHER_SERVICE], SERVING)
    log.info("batcher listening on %s", address)
    if on_ready is not None:
        on_ready(address)

    await stop.wait()
    await set_health(health_servicer, [BATCHER_SERVICE], NOT_SERVING)
    try:
        await asyncio.wait_for(service.drain(), timeout=settings.drain_timeout_s)
    except TimeoutError:
        log.warning("drain timed out with work still queued")
    await server.stop(grace=1.0)
    await service.close()
    await dead_letters.flush()
    refresher_stop.set()
    await refresher
    await directory.close()
    if metrics_server is not None:
        metrics_server.shutdown()
    engine.dispose()
    return 0
