"""The router process: Inference (public), optionally the Quota service in-process."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable

import grpc

from ferryman.config import CommonSettings
from ferryman.metrics_http import serve_metrics
from ferryman.serving import NOT_SERVING, SERVING, bind, create_server
from ferryman.telemetry import setup_tracing
from ferryman.v1 import inference_pb2, quota_pb2, quota_pb2_grpc
from registry.cache import SnapshotCache
from registry.db import make_engine
from router.batchers import BatcherPool
from router.handlers import add_inference_servicer
from router.metrics import RouterMetrics
from router.quota.client import LocalQuota, QuotaClient, RemoteQuota
from router.quota.service import QuotaService, make_backend
from router.quota.servicer import QuotaServicer
from router.quota.settings import QuotaSettings
from router.service import RouterService
from router.servicer import InferenceServicer
from router.settings import RouterSettings

log = logging.getLogger("ferryman.router")
INFERENCE = inference_pb2.DESCRIPTOR.services_by_name["Inference"].full_name
QUOTA = quota_pb2.DESCRIPTOR.services_by_name["Quota"].full_name


def _stop_event(stop: asyncio.Event | None) -> asyncio.Event:
    if stop is not None:
        return stop
    event = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, event.set)
    return event


async def serve_router(
    settings: RouterSettings,
    quota_settings: QuotaSettings,
    common: CommonSettings,
    stop: asyncio.Event | None = None,
    on_ready: Callable[[str], None] | None = None,
) -> int:
    """Run a router until SIGTERM/SIGINT (or ``stop``). Without a quota address the
    Quota service runs in this process, and is also served over gRPC on this port."""
    setup_tracing("router")
    stop = _stop_event(stop)
    engine = make_engine(common.resolved_database_url())
    cache = SnapshotCache(engine, settings.refresh_s, settings.heartbeat_timeout_s)
    refresher_stop = asyncio.Event()
    refresher = asyncio.create_task(cache.run(refresher_stop))
    await asyncio.wait_for(cache.loaded.wait(), timeout=settings.heartbeat_timeout_s)
    names = [INFERENCE]
    quota: QuotaClient
    quota_channel: grpc.aio.Channel | None = None
    local_quota: QuotaService | None = None
    if settings.quota_address:
        quota_channel = grpc.aio.insecure_channel(settings.quota_address)
        quota = RemoteQuota(quota_channel)
    else:
        local_quota = QuotaService(quota_settings, make_backend(quota_settings), lambda: cache.snapshot)
        quota = LocalQuota(local_quota)
        names.append(QUOTA)
    batchers = BatcherPool(
        settings.batcher_addresses(), settings.streams_per_batcher, settings.max_message_bytes
    )
    metrics = RouterMetrics(settings.max_tenant_labels)
    service = RouterService(settings, cache, quota, batchers, metrics)
    server, health = create_server(names, settings.max_message_bytes)
    add_inference_servicer(InferenceServicer(settings, cache, service, metrics), server)
    metrics_server = serve_metrics(settings.metrics_listen, metrics.registry)
    if local_quota is not None:
        quota_pb2_grpc.add_QuotaServicer_to_server(QuotaServicer(local_quota), server)
    port = bind(server, settings.listen)
    address = f"{settings.listen.rsplit(':', 1)[0]}:{port}"
    await server.start()
    await health.set("", SERVING)
    log.info("router listening on %s (quota %s)", address, settings.quota_address or "in-process")
    if on_ready is not None:
        on_ready(address)
    await stop.wait()
    await health.set("", NOT_SERVING)
    await server.stop(grace=2.0)
    await batchers.close()
    if quota_channel is not None:
        await quota_channel.close(grace=None)
    refresher_stop.set()
    await refresher
    if metrics_server is not None:
        metrics_server.shutdown()
    engine.dispose()
    return 0


async def serve_quota(
    settings: QuotaSettings,
    common: CommonSettings,
    stop: asyncio.Event | None = None,
    on_ready: Callable[[str], None] | None = None,
) -> int:
    """Run the Quota service on its own."""
    stop = _stop_event(stop)
    engine = make_engine(common.resolved_database_url())
    cache = SnapshotCache(engine, settings.refresh_s, heartbeat_timeout_s=settings.refresh_s)
    refresher_stop = asyncio.Event()
    refresher = asyncio.create_task(cache.run(refresher_stop))
    await asyncio.wait_for(cache.loaded.wait(), timeout=30)
    service = QuotaService(settings, make_backend(settings), lambda: cache.snapshot)
    server, health = create_server([QUOTA], settings.max_message_bytes)
    quota_pb2_grpc.add_QuotaServicer_to_server(QuotaServicer(service), server)
    port = bind(server, settings.listen)
    address = f"{settings.listen.rsplit(':', 1)[0]}:{port}"
    await server.start()
    await health.set("", SERVING)
    if on_ready is not None:
        on_ready(address)
    await stop.wait()
    await server.stop(grace=1.0)
    refresher_stop.set()
    await refresher
    engine.dispose()
    return 0
