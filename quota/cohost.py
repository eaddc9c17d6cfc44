"""The Quota service co-hosted in a router's process: called without a network hop, and
served to other services on the router's internal port when it has one."""

from __future__ import annotations

from collections.abc import Callable

import grpc

from ferryman.v1 import quota_pb2_grpc
from ferryman_server.kernel.quota import QuotaClient, ReserveCall, Verdict
from ferryman_server.quota.service import QuotaService, make_backend
from ferryman_server.quota.servicer import QuotaServicer
from ferryman_server.quota.settings import QuotaSettings
from ferryman_server.registry.snapshot import ConfigSnapshot


class LocalQuota:
    """The co-hosted quota service, called without a network hop."""

    def __init__(self, service: QuotaService) -> None:
        self.service = service

    def unlimited(self, tenant: str, model: str) -> bool:
        # The same snapshot the service decides on: no skew between the two answers.
        return not self.service.limits(tenant, model)

    async def reserve(self, call: ReserveCall, budget_s: float) -> Verdict:
        return await self.service.reserve(call)

    async def renew(self, request_ids: list[str], budget_s: float) -> int:
        return await self.service.renew(request_ids)

    async def commit(
        self, request_id: str, tokens: int, cost: float, budget_s: float, answer: bytes = b""
    ) -> bool:
        return await self.service.commit(request_id, tokens, cost, answer)

    async def release(self, request_id: str, budget_s: float) -> bool:
        return await self.service.release(request_id)

    async def charge(
        self, charge_id: str, tenant: str, model: str, total_cost: float, budget_s: float
    ) -> tuple[float, bool]:
        return await self.service.charge(charge_id, tenant, model, total_cost)


class CoHostedQuota:
    """What a router needs to host the Quota service itself (no quota address given)."""

    def __init__(self, settings: QuotaSettings) -> None:
        self.settings = settings
        self._service: QuotaService | None = None

    @property
    def redis_url(self) -> str:
        """The Redis the quota counters live on ('' for memory): routers share it for feedback."""
        return self.settings.redis_url if self.settings.backend == "redis" else ""

    @property
    def max_message_bytes(self) -> int:
        return self.settings.max_message_bytes

    @property
    def lease_s(self) -> float:
        return self.settings.lease_s

    def client(self, snapshot: Callable[[], ConfigSnapshot]) -> QuotaClient:
        """The in-process service, deciding on the router's own registry snapshot."""
        self._service = QuotaService(self.settings, make_backend(self.settings), snapshot)
        return LocalQuota(self._service)

    def serve_internal(self, server: grpc.aio.Server) -> None:
        """Add the Quota servicer (for other services) to the router's internal server."""
        assert self._service is not None, "client() first"
        quota_pb2_grpc.add_QuotaServicer_to_server(QuotaServicer(self._service), server)
