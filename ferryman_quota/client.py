"""How the router talks to quotas: in-process (co-hosted) or over gRPC, same interface."""

from __future__ import annotations

from typing import Protocol

import grpc

from ferryman.v1 import quota_pb2, quota_pb2_grpc
from ferryman_quota.policy import Decision, Verdict, Violation
from ferryman_quota.service import QuotaService, QuotaUnavailable

FROM_PROTO = {
    quota_pb2.QUOTA_DECISION_ADMIT: Decision.ADMIT,
    quota_pb2.QUOTA_DECISION_ADMIT_DEGRADED: Decision.DEGRADE,
    quota_pb2.QUOTA_DECISION_REJECT: Decision.REJECT,
    quota_pb2.QUOTA_DECISION_CONFLICT: Decision.CONFLICT,
}


class QuotaClient(Protocol):
    """Reserve's ``min_tokens`` and ``cost_per_token``: see ``ferryman_quota.policy.Ask``."""

    async def reserve(
        self,
        request_id: str,
        tenant: str,
        model: str,
        tokens: int,
        cost: float,
        fingerprint: str,
        budget_s: float,
        min_tokens: int = 0,
        cost_per_token: float = 0.0,
    ) -> Verdict: ...
    async def renew(self, request_ids: list[str], budget_s: float) -> int: ...
    async def commit(self, request_id: str, tokens: int, cost: float, budget_s: float) -> bool: ...
    async def release(self, request_id: str, budget_s: float) -> bool: ...
    async def charge(
        self, charge_id: str, tenant: str, model: str, total_cost: float, budget_s: float
    ) -> tuple[float, bool]:
        """(dollars added to the spend, a hard daily cost limit reached); raises
        QuotaUnavailable when the charge could not be made (try again: it is idempotent)."""
        ...

    def unlimited(self, tenant: str, model: str) -> bool:
        """True only when it is known here that no limit applies: Reserve would admit
        without holding anything, so the router need not call it (nor fingerprint)."""
        ...


class LocalQuota:
    """The co-hosted quota service, called without a network hop."""

    def __init__(self, service: QuotaService) -> None:
        self.service = service

    def unlimited(self, tenant: str, model: str) -> bool:
        # The same snapshot the service decides on: no skew between the two answers.
        return not self.service.limits(tenant, model)

    async def reserve(
        self,
        request_id: str,
        tenant: str,
        model: str,
        tokens: int,
        cost: float,
        fingerprint: str,
        budget_s: float,
        min_tokens: int = 0,
        cost_per_token: float = 0.0,
    ) -> Verdict:
        return await self.service.reserve(
            request_id,
            tenant,
            model,
            tokens,
            cost,
            fingerprint,
            min_tokens=min_tokens,
            cost_per_token=cost_per_token,
        )

    async def renew(self, request_ids: list[str], budget_s: float) -> int:
        return await self.service.renew(request_ids)

    async def commit(self, request_id: str, tokens: int, cost: float, budget_s: float) -> bool:
        return await self.service.commit(request_id, tokens, cost)

    async def release(self, request_id: str, budget_s: float) -> bool:
        return await self.service.release(request_id)

    async def charge(
        self, charge_id: str, tenant: str, model: str, total_cost: float, budget_s: float
    ) -> tuple[float, bool]:
        return await self.service.charge(charge_id, tenant, model, total_cost)


class RemoteQuota:
    """A Quota server over gRPC; UNAVAILABLE from it (or no answer) is QuotaUnavailable."""

    def __init__(self, channel: grpc.aio.Channel, metadata: tuple[tuple[str, str], ...]) -> None:
        self._stub = quota_pb2_grpc.QuotaStub(channel)
        self._metadata = metadata

    def unlimited(self, tenant: str, model: str) -> bool:
        return False  # the Quota server decides on its own snapshot: always ask it

    async def reserve(
        self,
        request_id: str,
        tenant: str,
        model: str,
        tokens: int,
        cost: float,
        fingerprint: str,
        budget_s: float,
        min_tokens: int = 0,
        cost_per_token: float = 0.0,
    ) -> Verdict:
        request = quota_pb2.ReserveRequest(
            request_id=request_id,
            tenant=tenant,
            model=model,
            estimated_tokens=tokens,
            estimated_cost_usd=cost,
            fingerprint=fingerprint,
            min_tokens=min_tokens,
            cost_per_token_usd=cost_per_token,
        )
        try:
            response: quota_pb2.ReserveResponse = await self._stub.Reserve(
                request, timeout=budget_s, metadata=self._metadata
            )
        except grpc.aio.AioRpcError as exc:
            raise QuotaUnavailable(f"quota service: {exc.code().name} {exc.details()}") from exc
        decision = FROM_PROTO[response.decision]
        return Verdict(
            decision,
            tuple(Violation(v.limit, v.current, v.maximum) for v in response.violations),
            response.retry_after.ToTimedelta().total_seconds(),
            held=response.held,
            tokens=response.granted_tokens,
            repeat=response.repeat,
        )

    async def renew(self, request_ids: list[str], budget_s: float) -> int:
        try:
            response: quota_pb2.RenewResponse = await self._stub.Renew(
                quota_pb2.RenewRequest(request_ids=request_ids), timeout=budget_s, metadata=self._metadata
            )
        except grpc.aio.AioRpcError:
            return 0
        return int(response.renewed)

    async def commit(self, request_id: str, tokens: int, cost: float, budget_s: float) -> bool:
        request = quota_pb2.CommitRequest(request_id=request_id, actual_tokens=tokens, actual_cost_usd=cost)
        try:
            response: quota_pb2.SettleResponse = await self._stub.Commit(
                request, timeout=budget_s, metadata=self._metadata
            )
        except grpc.aio.AioRpcError:
            return False
        return response.applied

    async def release(self, request_id: str, budget_s: float) -> bool:
        try:
            response: quota_pb2.SettleResponse = await self._stub.Release(
                quota_pb2.ReleaseRequest(request_id=request_id), timeout=budget_s, metadata=self._metadata
            )
        except grpc.aio.AioRpcError:
            return False
        return response.applied

    async def charge(
        self, charge_id: str, tenant: str, model: str, total_cost: float, budget_s: float
    ) -> tuple[float, bool]:
        request = quota_pb2.ChargeRequest(
            charge_id=charge_id, tenant=tenant, model=model, total_cost_usd=total_cost
        )
        try:
            response: quota_pb2.ChargeResponse = await self._stub.Charge(
                request, timeout=budget_s, metadata=self._metadata
            )
        except grpc.aio.AioRpcError as exc:
            raise QuotaUnavailable(f"quota service: {exc.code().name} {exc.details()}") from exc
        return response.charged_usd, response.over_limit
