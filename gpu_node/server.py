"""The node process: serve, register, load placements, heartbeat, drain on SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable

import torch

from ferryman.config import CommonSettings
from ferryman.metrics_http import serve_metrics
from ferryman.security import ServiceTokenInterceptor, bind
from ferryman.serving import NOT_SERVING, SERVING, create_server, set_health
from ferryman.telemetry import setup_tracing
from ferryman.v1 import node_pb2, node_pb2_grpc
from gpu_node.loader import resolve_device
from gpu_node.metrics import NodeMetrics
from gpu_node.service import NodeService
from gpu_node.servicer import NodeServicer
from gpu_node.settings import NodeSettings
from registry.db import make_engine
from registry.reader import RegistryReader
from registry.specs import version_spec
from registry.states import NodeLifecycle
from registry.writer import RegistryWriter

log = logging.getLogger("ferryman.node")
NODE_SERVICE = node_pb2.DESCRIPTOR.services_by_name["Node"].full_name


class RegistryLink:
    """The node's registry calls, off the event loop; a registry outage never stops serving."""

    def __init__(self, common: CommonSettings, settings: NodeSettings, address: str) -> None:
        engine = make_engine(common.resolved_database_url())
        self._writer = RegistryWriter(engine, actor=f"node:{settings.name}")
        self._reader = RegistryReader(engine)
        self._settings = settings
        self._address = address

    async def register(self, device: str) -> None:
        await asyncio.to_thread(
            self._writer.register_node,
            self._settings.name,
            self._address,
            device=device,
            capacity=self._settings.capacity,
        )

    async def placements(self) -> list[node_pb2.ModelVersionSpec]:
        rows = await asyncio.to_thread(self._reader.placements_for, self._settings.name, self._settings.pool)
        return [version_spec(model, row) for model, row in rows]

    async def lifecycle(self, target: NodeLifecycle) -> None:
        try:
            await asyncio.to_thread(self._writer.set_node_lifecycle, self._settings.name, target.value)
        except Exception:
            log.exception("could not record lifecycle %s in the registry", target)

    async def heartbeat_forever(self, service: NodeService) -> None:
        while True:
            try:
                await asyncio.to_thread(self._writer.heartbeat, self._settings.name, service.serving_keys())
            except Exception as exc:
                log.warning("heartbeat failed (still serving): %s", exc)
            await asyncio.sleep(self._settings.heartbeat_interval_s)


async def serve_node(
    settings: NodeSettings,
    common: CommonSettings,
    stop: asyncio.Event | None = None,
    on_ready: Callable[[str], None] | None = None,
) -> int:
    """Run a node until SIGTERM/SIGINT (or, when given, until ``stop`` is set).

    ``on_ready`` is called with the node's address once it serves.
    """
    setup_tracing("node")
    if settings.torch_threads:
        torch.set_num_threads(settings.torch_threads)
    device = resolve_device(settings.device)
    security = common.security()
    server, health_servicer = create_server(
        [NODE_SERVICE], settings.max_message_bytes, [ServiceTokenInterceptor(security.token)]
    )
    metrics = NodeMetrics()
    service = NodeService(settings, device, health_servicer, metrics)
    metrics_server = serve_metrics(settings.metrics_listen, metrics.registry)
    node_pb2_grpc.add_NodeServicer_to_server(NodeServicer(service), server)
    port = bind(server, settings.listen, security, internal=True)
    address = settings.advertise or f"{settings.listen.rsplit(':', 1)[0]}:{port}"
    await set_health(health_servicer, [NODE_SERVICE], NOT_SERVING)
    await server.start()
    log.info("node %s listening on %s (device %s)", settings.name, address, device)

    if stop is None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)

    link = RegistryLink(common, settings, address) if settings.use_registry else None
    heartbeat: asyncio.Task[None] | None = None
    if link is not None:
        await link.register(str(device))
        for spec in await link.placements():
            slot = await service.load(spec)
            log.info("version %s: %s %s", slot.key, slot.state, slot.reason)
        heartbeat = asyncio.create_task(link.heartbeat_forever(service))
    service.set_lifecycle(NodeLifecycle.READY)
    if link is not None:
        await link.lifecycle(NodeLifecycle.READY)
    await set_health(health_servicer, [NODE_SERVICE], SERVING)
    if on_ready is not None:
        on_ready(address)

    await stop.wait()
    log.info("node %s draining", settings.name)
    if link is not None:
        await link.lifecycle(NodeLifecycle.DRAINING)
    drained = await service.drain()
    if heartbeat is not None:
        heartbeat.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await heartbeat
    if link is not None:
        await link.lifecycle(NodeLifecycle.GONE)
    await server.stop(grace=None)
    service.close()
    if metrics_server is not None:
        metrics_server.shutdown()
    log.info("node %s stopped (%s)", settings.name, "drained" if drained else "grace period ran out")
    return 0
