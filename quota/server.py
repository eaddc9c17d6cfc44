"""The Quota service's own process (``ferryman serve quota``): internal port only."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from prometheus_client import CollectorRegistry

from ferryman.v1 import quota_pb2, quota_pb2_grpc
from ferryman_server.kernel.config import CommonSettings
from ferryman_server.kernel.runtime import ServiceSpec, run_service
from ferryman_server.quota.service import QuotaService, make_backend
from ferryman_server.quota.servicer import QuotaServicer
from ferryman_server.quota.settings import QuotaSettings
from ferryman_server.registry.cache import SnapshotCache
from ferryman_server.registry.db import make_engine

QUOTA = quota_pb2.DESCRIPTOR.services_by_name["Quota"].full_name
CACHE_LOAD_TIMEOUT_S = 30.0


async def serve_quota(
    settings: QuotaSettings,
    common: CommonSettings,
    stop: asyncio.Event | None = None,
    on_ready: Callable[[str], None] | None = None,
) -> int:
    """Run the Quota service on its own."""
    spec = ServiceSpec.of("quota", settings, [QUOTA], CollectorRegistry())
    async with run_service(spec, common, stop) as rt:
        engine = make_engine(common.resolved_database_url())
        rt.on_close(engine.dispose)
        cache = SnapshotCache(engine, common.registry_refresh_s, common.heartbeat_timeout_s)
        refresher_stop = asyncio.Event()
        refresher = asyncio.create_task(cache.run(refresher_stop))
        await asyncio.wait_for(cache.loaded.wait(), timeout=CACHE_LOAD_TIMEOUT_S)
        service = QuotaService(settings, make_backend(settings), lambda: cache.snapshot)
        await service.warm()
        quota_pb2_grpc.add_QuotaServicer_to_server(QuotaServicer(service), rt.server)
        await rt.serve(on_ready)
        await rt.stop_serving()
        refresher_stop.set()
        await refresher
    return 0
