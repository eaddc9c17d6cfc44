"""The router process: Inference on the public port; the Quota service in-process
(served to other services on a separate internal port when asked) or remote."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable

import grpc

from ferryman.config import CommonSettings
from ferryman.metrics_http import serve_metrics
from ferryman.security import ServiceTokenInterceptor, aio_channel, bind
from ferryman.serving import NOT_SERVING, SERVING, create_server, set_health
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
    Quota service runs in this process (served to other services only on
    ``internal_listen``, never on the public port)."""
    setup_tracing("router")
    security = common.security()
    # The public port serves tenant APIs only. Bound first: a port in use fails at once.
    server, health = create_server([INFERENCE], settings.max_message_bytes)
    port = bind(server, settings.listen, security, internal=False)
    stop = _stop_event(stop)
    engine = make_engine(common.resolved_database_url())
    cache = SnapshotCache(engine, settings.refresh_s, settings.heartbeat_timeout_s)
    refresher_stop = asyncio.Event()
    refresher = asyncio.create_task(cache.run(refresher_stop))
    await asyncio.wait_for(cache.loaded.wait(), timeout=settings.heartbeat_timeout_s)
    quota: QuotaClient
    quota_channel: grpc.aio.Channel | None = None
    local_quota: QuotaService | None = None
    if settings.quota_address:
        quota_channel = aio_channel(settings.quota_address, security)
        quota = RemoteQuota(quota_channel, security.metadata())
    else:
        local_quota = QuotaService(quota_settings, make_backend(quota_settings), lambda: cache.snapshot)
        quota = LocalQuota(local_quota)
    batchers = BatcherPool(
        settings.batcher_addresses(), settings.streams_per_batcher, settings.max_message_bytes, security
    )
    metrics = RouterMetrics(settings.max_tenant_labels)
    service = RouterService(settings, cache, quota, batchers, metrics)
    renewer = asyncio.create_task(service.renew_leases(refresher_stop))
    add_inference_servicer(InferenceServicer(settings, cache, service, metrics), server)
    internal: grpc.aio.Server | None = None
    if local_quota is not None and settings.internal_listen:
        internal, internal_health = create_server(
            [QUOTA], quota_settings.max_message_bytes, [ServiceTokenInterceptor(security.token)]
        )
        quota_pb2_grpc.add_QuotaServicer_to_server(QuotaServicer(local_quota), internal)
        internal_port = bind(internal, settings.internal_listen, security, internal=True)
        await internal.start()
        await set_health(internal_health, [QUOTA], SERVING)
        log.info("in-process quota served to services on port %d", internal_port)
    metrics_server = serve_metrics(settings.metrics_listen, metrics.registry)
    address = f"{settings.listen.rsplit(':', 1)[0]}:{port}"
    await server.start()
    await set_health(health, [INFERENCE], SERVING)
    log.info("router listening on %s (quota %s)", address, settings.quota_address or "in-process")
    if on_ready is not None:
        on_ready(address)
    await stop.wait()
    await set_health(health, [INFERENCE], NOT_SERVING)
    await server.stop(grace=2.0)
    if internal is not None:
        await internal.stop(grace=1.0)
    refresher_stop.set()
    await renewer
    await service.close()
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
    security = common.security()
    server, health = create_server(
        [QUOTA], settings.max_message_bytes, [ServiceTokenInterceptor(security.token)]
    )
    quota_pb2_grpc.add_QuotaServicer_to_server(QuotaServicer(service), server)
    port = bind(server, settings.listen, security, internal=True)
    address = f"{settings.listen.rsplit(':', 1)[0]}:{port}"
    await server.start()
    await set_health(health, [QUOTA], SERVING)
    if on_ready is not None:
        on_ready(address)
    await stop.wait()
    await server.stop(grace=1.0)
    refresher_stop.set()
    await refresher
    engine.dispose()
    return 0
