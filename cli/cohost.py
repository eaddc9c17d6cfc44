"""Router and batcher in one process: the router hands items to the batcher through the
in-process port (no Submit stream, no encoding). The composition root may import both."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ferryman_server.batcher.host import BatcherHost
from ferryman_server.batcher.local import LocalBatcher
from ferryman_server.batcher.metrics import BatcherMetrics
from ferryman_server.batcher.settings import BatcherSettings
from ferryman_server.kernel.config import CommonSettings
from ferryman_server.kernel.metrics_http import serve_metrics
from ferryman_server.kernel.metrics_otlp import otlp_metrics
from ferryman_server.kernel.telemetry import setup_tracing
from ferryman_server.quota.cohost import CoHostedQuota
from ferryman_server.quota.settings import QuotaSettings
from ferryman_server.router.server import serve_router
from ferryman_server.router.settings import RouterSettings


async def serve_router_with_batcher(
    router: RouterSettings,
    quota: QuotaSettings,
    batcher: BatcherSettings,
    common: CommonSettings,
    stop: asyncio.Event | None = None,
    on_ready: Callable[[str], None] | None = None,
) -> int:
    """Run a router whose batcher lives in the same process, until SIGTERM/SIGINT (or
    ``stop``); the batcher drains after the router stops taking requests."""
    # Before the batcher takes its tracer: one made while nothing records stays a no-op, and
    # the in-process batcher's queue and dispatch spans were lost ("ferryman up"'s topology).
    setup_tracing("router")
    metrics = BatcherMetrics()
    metrics_server = serve_metrics(batcher.metrics_listen, metrics.registry, common.handshake_timeout_s)
    host = BatcherHost(batcher, common, metrics)
    await host.start()
    with otlp_metrics(metrics.registry, "batcher"):
        try:
            return await serve_router(
                router,
                CoHostedQuota(quota),
                common,
                stop,
                on_ready,
                batcher=LocalBatcher(host.service, host.generation),
            )
        finally:
            await host.drain()
            await host.stop()
            if metrics_server is not None:
                metrics_server.shutdown()
