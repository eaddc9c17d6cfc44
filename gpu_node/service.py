"""One node as its gRPC servicer sees it: its lifecycle, its memory (``memory.py``), the
versions it holds (``versions.py``) and what it serves from them (``serving.py``)."""

from __future__ import annotations

import asyncio

import torch

# Public as grpc_health.v1.health.aio; imported by module path so type checkers see it.
from grpc_health.v1._async import HealthServicer

from ferryman.v1 import node_pb2
from ferryman_server.gpu_node.fetch import ArtifactCache
from ferryman_server.gpu_node.memory import NodeMemory
from ferryman_server.gpu_node.metrics import NodeMetrics
from ferryman_server.gpu_node.serving import Serving
from ferryman_server.gpu_node.settings import NodeSettings
from ferryman_server.gpu_node.versions import Audit, Versions
from ferryman_server.registry.states import NodeLifecycle, next_node_lifecycle


class Node:
    """A node's parts, wired once: memory accounting, versions, serving, and drain."""

    def __init__(
        self,
        settings: NodeSettings,
        device: torch.device,
        health_servicer: HealthServicer,
        metrics: NodeMetrics,
        artifacts: ArtifactCache | None = None,
        audit: Audit | None = None,
    ):
        self.settings = settings
        self.device = device
        self.metrics = metrics
        self.lifecycle = NodeLifecycle.STARTING
        self._health = health_servicer
        self.memory = NodeMemory(
            settings.name, device, settings.memory_budget_bytes, settings.evict_after_idle_s
        )
        metrics.memory_budget.set(self.memory.budget)
        self.versions = Versions(settings, device, self.memory, health_servicer, metrics, artifacts, audit)
        self.serving = Serving(
            settings.name,
            settings.capacity,
            self.versions,
            metrics,
            draining=lambda: self.lifecycle == NodeLifecycle.DRAINING,
        )

    def set_lifecycle(self, target: NodeLifecycle) -> None:
        self.lifecycle = next_node_lifecycle(self.lifecycle, target)
        self.metrics.up.set(1 if target == NodeLifecycle.READY else 0)

    def info(self) -> node_pb2.NodeInfoResponse:
        total, used = self.memory.totals()
        settle_s = self.settings.evict_after_idle_s
        return node_pb2.NodeInfoResponse(
            name=self.settings.name,
            device=str(self.device),
            memory_total=total,
            memory_used=used,
            versions=[slot.to_proto(settle_s) for _, slot in sorted(self.versions.slots.items())],
            lifecycle=self.lifecycle.value,
            capacity=self.settings.capacity,
            memory_budget=self.memory.budget,
        )

    async def drain(self) -> bool:
        """Refuse new batches, report NOT_SERVING, wait for in-flight ones (up to the grace)."""
        if self.lifecycle != NodeLifecycle.DRAINING:
            self.set_lifecycle(NodeLifecycle.DRAINING)
        await self._health.enter_graceful_shutdown()
        try:
            await asyncio.wait_for(self.versions.idle(), timeout=self.settings.drain_grace_s)
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        """Stop the generation engines (their workers deliver to this loop), then the pools."""
        await self.versions.close()
        self.serving.close()
