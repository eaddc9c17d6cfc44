"""The node process: serve, register, load placements, heartbeat, drain on SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import torch

from ferryman.v1 import node_pb2, node_pb2_grpc
from ferryman_server.gpu_node.fetch import ArtifactCache
from ferryman_server.gpu_node.generation import lora
from ferryman_server.gpu_node.loader import resolve_device
from ferryman_server.gpu_node.metrics import NodeMetrics
from ferryman_server.gpu_node.service import Node
from ferryman_server.gpu_node.servicer import NodeServicer
from ferryman_server.gpu_node.settings import NodeSettings
from ferryman_server.gpu_node.versions import Versions
from ferryman_server.kernel.artifacts import artifact_path
from ferryman_server.kernel.config import CommonSettings
from ferryman_server.kernel.logs import Throttled
from ferryman_server.kernel.runtime import ServiceSpec, run_service
from ferryman_server.registry.db import make_engine
from ferryman_server.registry.reader import RegistryReader
from ferryman_server.registry.specs import version_spec
from ferryman_server.registry.states import ModelFormat, NodeLifecycle
from ferryman_server.registry.writer import RegistryWriter

log = logging.getLogger("ferryman.node")
NODE_SERVICE = node_pb2.DESCRIPTOR.services_by_name["Node"].full_name
PROBLEM_LOG_PERIODS = 10
"""A repeated placement-read failure is logged once per this many refresh periods."""


class RegistryLink:
    """The node's registry calls, off the event loop; a registry outage never stops serving."""

    def __init__(self, common: CommonSettings, settings: NodeSettings, address: str) -> None:
        engine = make_engine(common.resolved_database_url())
        self._writer = RegistryWriter(engine, actor=f"node:{settings.name}")
        self.reader = RegistryReader(engine)
        """Also where the artifact cache reads pushed artifacts (one engine a process)."""
        self._settings = settings
        self._address = address
        self._placed: set[str] = set()
        """Versions this node loaded because the registry placed them (not by LoadModel)."""

    async def register(self, device: str) -> None:
        await asyncio.to_thread(
            self._writer.register_node,
            self._settings.name,
            self._address,
            device=device,
            capacity=self._settings.capacity,
        )

    async def placements(self) -> list[node_pb2.ModelVersionSpec]:
        rows = await asyncio.to_thread(self.reader.placements_for, self._settings.name, self._settings.pool)
        return [version_spec(model, row) for model, row in rows]

    async def follow(self, versions: Versions, placed: list[node_pb2.ModelVersionSpec]) -> None:
        """Load what is placed here and not loaded; unload what this node loaded for a
        placement that is gone (a version loaded by LoadModel is the caller's to unload)."""
        wanted = {f"{v.model}:{v.version}": v for v in placed}
        for key in sorted(self._placed - wanted.keys()):
            model, _, version = key.partition(":")
            await versions.unload(model, version)
            self._placed.discard(key)
            log.info("version %s unloaded: no longer placed on this node", key)
        # LoRA adapters after the models: an adapter loads into its base's engine.
        for key, spec in sorted(wanted.items(), key=lambda item: local_adapter(item[1])):
            held = versions.slots.get(key)
            if held is None or held.no_room or (held.awaits_base and versions.serves(held.awaits_base)):
                # Not loaded, or not yet: for want of room, or an adapter whose base serves now.
                slot = (await versions.load(spec, pinned=True)).slot
                if held is None or slot.state != held.state:
                    log.info("version %s: %s %s", slot.key, slot.state, slot.reason)
            else:
                held.pinned = True  # loaded on demand, placed since
            self._placed.add(key)

    async def watch_placements(self, versions: Versions) -> None:
        """Follow, every ``placement_refresh_s``, the placements made and taken back since start."""
        problems = Throttled(log, self._settings.placement_refresh_s * PROBLEM_LOG_PERIODS)
        while True:
            await asyncio.sleep(self._settings.placement_refresh_s)
            try:
                placed = await self.placements()
            except Exception as exc:  # a registry outage: serve on, try again later
                problems.warning("placements", "could not read placements (serving on): %s", exc)
                continue
            try:
                await self.follow(versions, placed)
            except Exception:  # one placement's bug must not end the watcher: the next pass tries again
                log.exception("following the placements failed")

    async def audit(self, action: str, key: str, detail: dict[str, object]) -> None:
        """Record a load or eviction this node decided in the audit log (best effort: the
        registry being down never stops a load)."""
        try:
            await asyncio.to_thread(self._writer.record_node_change, self._settings.name, action, key, detail)
        except Exception as exc:
            log.warning("could not audit %s of %s: %s", action, key, exc)

    async def lifecycle(self, target: NodeLifecycle) -> None:
        try:
            await asyncio.to_thread(self._writer.set_node_lifecycle, self._settings.name, target.value)
        except Exception:
            log.exception("could not record lifecycle %s in the registry", target)

    async def heartbeat_forever(self, versions: Versions) -> None:
        while True:
            try:
                await asyncio.to_thread(
                    self._writer.heartbeat, self._settings.name, versions.serving_keys(), versions.failures()
                )
            except Exception as exc:
                log.warning("heartbeat failed (still serving): %s", exc)
            await asyncio.sleep(self._settings.heartbeat_interval_s)


def local_adapter(spec: node_pb2.ModelVersionSpec) -> bool:
    """Whether a version's artifact is a LoRA adapter directory on this machine."""
    path = artifact_path(spec.artifact_uri)
    return spec.format == ModelFormat.CAUSAL_LM and path is not None and lora.is_adapter(path)


async def serve_node(
    settings: NodeSettings,
    common: CommonSettings,
    stop: asyncio.Event | None = None,
    on_ready: Callable[[str], None] | None = None,
) -> int:
    """Run a node until SIGTERM/SIGINT (or, when given, until ``stop`` is set).

    ``on_ready`` is called with the node's address once it serves.
    """
    device = resolve_device(settings.device)
    settings = settings.sized(device.type)
    if settings.torch_threads:
        torch.set_num_threads(settings.torch_threads)
    metrics = NodeMetrics()
    # grace_s None: drained before the server stops.
    spec = ServiceSpec.of("node", settings, [NODE_SERVICE], metrics.registry, grace_s=None)
    async with run_service(spec, common, stop) as rt:
        address = settings.advertise or rt.address
        link = RegistryLink(common, settings, address) if settings.use_registry else None
        artifacts = ArtifactCache(
            common.data_dir / "artifact-cache",
            settings.artifact_cache_bytes,
            settings.artifact_fetch_timeout_s,
            link.reader if link is not None else None,
            deadline_s=settings.artifact_fetch_deadline_s,
        )
        node = Node(settings, device, rt.health, metrics, artifacts, link.audit if link is not None else None)
        rt.on_close(node.close)
        node_pb2_grpc.add_NodeServicer_to_server(NodeServicer(node), rt.server)
        # Reachable (NOT_SERVING) while it registers and loads its placements.
        await rt.start(serving=False)
        heartbeat: asyncio.Task[None] | None = None
        watcher: asyncio.Task[None] | None = None
        if link is not None:
            await link.register(str(device))
            await link.follow(node.versions, await link.placements())
            heartbeat = asyncio.create_task(link.heartbeat_forever(node.versions))
            watcher = asyncio.create_task(link.watch_placements(node.versions))
        node.set_lifecycle(NodeLifecycle.READY)
        if link is not None:
            await link.lifecycle(NodeLifecycle.READY)
        await rt.serve(on_ready, address)
        log.info("node %s draining", settings.name)
        if link is not None:
            await link.lifecycle(NodeLifecycle.DRAINING)
        if watcher is not None:  # a draining node loads nothing new
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        drained = await node.drain()
        if heartbeat is not None:
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat
        if link is not None:
            await link.lifecycle(NodeLifecycle.GONE)
    log.info("node %s stopped (%s)", settings.name, "drained" if drained else "grace period ran out")
    return 0
