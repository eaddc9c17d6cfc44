"""The router process: Inference on the public port; quotas from a remote Quota service, or
from one the composition root hands it to co-host (served to other services on a separate
internal port when asked)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

import grpc

from ferryman.v1 import inference_pb2, jobs_pb2, quota_pb2
from ferryman_server.jobs.port import jobs_enabled, open_job_queue
from ferryman_server.kernel.config import CommonSettings
from ferryman_server.kernel.connections import GuardLimits
from ferryman_server.kernel.quota import RENEWALS_PER_LEASE, QuotaClient, RemoteQuota
from ferryman_server.kernel.runtime import ServiceRuntime, ServiceSpec, run_service
from ferryman_server.kernel.security import aio_channel
from ferryman_server.registry.cache import SnapshotCache
from ferryman_server.registry.db import make_engine
from ferryman_server.registry.snapshot import ConfigSnapshot
from ferryman_server.registry.writer import RegistryWriter
from ferryman_server.router.batchers import BatcherPool, BatcherPort
from ferryman_server.router.doors.decoding import add_inference_servicer, add_jobs_servicer
from ferryman_server.router.doors.http.server import HttpDoor
from ferryman_server.router.doors.native.jobs_servicer import JobsServicer
from ferryman_server.router.doors.native.servicer import InferenceServicer
from ferryman_server.router.doors.oip.servicer import SERVICE as OIP_SERVICE
from ferryman_server.router.doors.oip.servicer import OipServicer, add_oip_servicer
from ferryman_server.router.feedback import FeedbackDesk, MemoryServedLog, RedisServedLog, ServedLog
from ferryman_server.router.gateway import Gateway
from ferryman_server.router.generation import Generator
from ferryman_server.router.job_charges import JobCharges
from ferryman_server.router.jobs import JobDesk
from ferryman_server.router.metrics import RouterMetrics
from ferryman_server.router.reservations import Reservations
from ferryman_server.router.service import RouterService
from ferryman_server.router.settings import RouterSettings
from ferryman_server.router.shadow import Shadower
from ferryman_server.router.spill import Spill

log = logging.getLogger("ferryman.router")
INFERENCE = inference_pb2.DESCRIPTOR.services_by_name["Inference"].full_name
QUOTA = quota_pb2.DESCRIPTOR.services_by_name["Quota"].full_name
JOBS = jobs_pb2.DESCRIPTOR.services_by_name["Jobs"].full_name


class QuotaHost(Protocol):
    """The Quota service a router co-hosts when it has no quota address (the composition
    root builds it: ``ferryman_server.quota.cohost.CoHostedQuota``)."""

    @property
    def redis_url(self) -> str:
        """The Redis its counters live on, '' when they are in memory."""
        ...

    @property
    def max_message_bytes(self) -> int: ...

    @property
    def lease_s(self) -> float:
        """How long a reservation lives past its last renewal."""
        ...

    def client(self, snapshot: Callable[[], ConfigSnapshot]) -> QuotaClient:
        """The in-process service deciding on ``snapshot``; called once."""
        ...

    def serve_internal(self, server: grpc.aio.Server) -> None:
        """Serve it to other services on ``server`` (after ``client``)."""
        ...


def served_log(settings: RouterSettings, quota: QuotaHost) -> ServedLog:
    """Where answers wait for their Feedback: a Redis the routers share when there is one."""
    url = settings.feedback_redis_url or quota.redis_url
    if url:
        return RedisServedLog(url, settings.feedback_window_s)
    return MemoryServedLog(settings.feedback_window_s, settings.feedback_max_requests)


async def serve_router(
    settings: RouterSettings,
    quota_host: QuotaHost,
    common: CommonSettings,
    stop: asyncio.Event | None = None,
    on_ready: Callable[[str], None] | None = None,
    batcher: BatcherPort | None = None,
) -> int:
    """Run a router until SIGTERM/SIGINT (or ``stop``). Without a quota address
    ``quota_host`` runs in this process (served to other services only on
    ``internal_listen``, never on the public port). Items go to ``batcher`` when given
    (one in this process), else over gRPC to the configured batchers."""
    metrics = RouterMetrics(settings.max_tenant_labels)
    # The public port serves tenant APIs only; bound first, so a port in use fails at once.
    spec = ServiceSpec.of(
        "router",
        settings,
        [INFERENCE, OIP_SERVICE, *([JOBS] if jobs_enabled(common) else [])],
        metrics.registry,
        internal=False,
        grace_s=2.0,
        reuse_port=settings.reuse_port,
        max_calls=settings.max_calls,
        max_streams=settings.max_streams_per_connection,
    )
    async with run_service(spec, common, stop) as rt:
        engine = make_engine(common.resolved_database_url())
        rt.on_close(engine.dispose)
        cache = SnapshotCache(engine, common.registry_refresh_s, common.heartbeat_timeout_s)
        refresher_stop = asyncio.Event()
        refresher = asyncio.create_task(cache.run(refresher_stop))
        await asyncio.wait_for(cache.loaded.wait(), timeout=common.heartbeat_timeout_s)
        quota: QuotaClient
        co_hosted = not settings.quota_address
        if co_hosted and settings.lease_renew_s * RENEWALS_PER_LEASE > quota_host.lease_s:
            raise ValueError(
                f"FERRYMAN_ROUTER_LEASE_RENEW_S ({settings.lease_renew_s:g}) must be at most "
                f"1/{RENEWALS_PER_LEASE} of FERRYMAN_QUOTA_LEASE_S ({quota_host.lease_s:g})"
            )
        if co_hosted:
            quota = quota_host.client(lambda: cache.snapshot)
        else:
            quota_channel = aio_channel(settings.quota_address, rt.security)
            rt.on_close(lambda: quota_channel.close(grace=None))
            quota = RemoteQuota(quota_channel, rt.security.metadata())
            # Connect now, not on the first request: a burst's first Reserves would pay for it.
            quota_channel.get_state(try_to_connect=True)
        discovery: asyncio.Task[None] | None = None
        batchers: BatcherPort
        if batcher is not None:
            batchers = batcher
        else:
            pool = BatcherPool(
                settings.batcher_addresses(),
                settings.streams_per_batcher,
                settings.max_message_bytes,
                rt.security,
            )
            await pool.refresh(settings.batcher_discovery_s)
            discovery = asyncio.create_task(pool.discover(settings.batcher_discovery_s, refresher_stop))
            batchers = pool
        reservations = Reservations(settings, quota, metrics)
        service = RouterService(settings, cache, reservations, batchers, metrics)
        renewer = asyncio.create_task(reservations.renew_leases(refresher_stop))
        served = served_log(settings, quota_host)
        if isinstance(served, RedisServedLog):
            flusher = asyncio.create_task(served.run(refresher_stop))
            rt.on_close(lambda: flusher)
        feedback = FeedbackDesk(settings, served, RegistryWriter(engine, actor="router"))
        shadower = Shadower(settings, batchers, metrics, cache.is_ready)
        desk: JobDesk | None = None
        jobs = open_job_queue(common, settings.job_store_timeout_s)
        if jobs is not None:
            rt.on_close(jobs.close)
            charges = JobCharges(settings, jobs, quota)
            charging = asyncio.create_task(charges.run(refresher_stop))
            rt.on_close(lambda: charging)
            desk = JobDesk(settings, service, cache, jobs, charges)
        gateway = Gateway(
            settings,
            cache,
            service,
            Generator(settings, service, reservations, batchers, metrics),
            metrics,
            on_answer=(shadower.answered, feedback.answered),
            spill=Spill(settings, desk, metrics) if desk is not None else None,
        )
        gateway.listening(rt.address)
        add_inference_servicer(InferenceServicer(gateway, feedback), rt.server)
        add_oip_servicer(OipServicer(gateway), rt.server)
        if desk is not None:
            add_jobs_servicer(JobsServicer(gateway, desk), rt.server)
        if settings.http_listen:
            http = HttpDoor(
                gateway,
                settings.http_listen,
                GuardLimits(
                    max_connections=settings.http_max_connections,
                    max_per_peer=settings.http_max_connections_per_peer,
                    header_timeout_s=settings.http_header_timeout_s,
                    body_timeout_s=settings.http_body_timeout_s,
                    max_header_bytes=settings.http_max_header_bytes,
                    write_timeout_s=settings.http_write_timeout_s,
                ),
                common.tls_cert,
                common.tls_key,
                reuse_port=settings.reuse_port,
                jobs=desk,
                proxies=common.proxies(),
            )
            await http.start()
            gateway.listening(http.address, http=True)
            rt.on_close(http.close)
            log.info("HTTP doors (OIP REST /v2, OpenAI /v1) listening on %s", http.address)
        if co_hosted and settings.internal_listen:
            internal = ServiceSpec(
                name="quota",
                listen=settings.internal_listen,
                services=[QUOTA],
                max_message_bytes=quota_host.max_message_bytes,
                internal=True,
            )
            internal_rt = ServiceRuntime(internal, rt.security, rt.stop, rt.options)
            quota_host.serve_internal(internal_rt.server)
            await internal_rt.start(serving=True)
            rt.on_close(internal_rt.close)
            log.info("in-process quota served to services on port %d", internal_rt.port)
        await rt.serve(on_ready)
        await rt.stop_serving()
        refresher_stop.set()
        await renewer
        await shadower.close()
        if isinstance(feedback.served, RedisServedLog):
            await feedback.served.close()
        await reservations.close()
        if discovery is not None:
            await discovery
        await batchers.close()
        await refresher
    return 0
