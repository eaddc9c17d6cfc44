"""The Quota gRPC servicer: a thin shell over QuotaService."""

from __future__ import annotations

import asyncio

import grpc

from ferryman.durations import set_seconds
from ferryman.errors import make_status
from ferryman.v1 import quota_pb2, quota_pb2_grpc
from ferryman_server.kernel.quota import (
    MAX_RESERVE_MANY,
    Ask,
    Decision,
    QuotaUnavailable,
    ReserveCall,
    Verdict,
)
from ferryman_server.kernel.serving import ServicerContext
from ferryman_server.quota.service import InvalidQuotaCall, QuotaService

DECISIONS = {
    Decision.ADMIT: quota_pb2.QUOTA_DECISION_ADMIT,
    Decision.DEGRADE: quota_pb2.QUOTA_DECISION_ADMIT_DEGRADED,
    Decision.REJECT: quota_pb2.QUOTA_DECISION_REJECT,
    Decision.CONFLICT: quota_pb2.QUOTA_DECISION_CONFLICT,
}


def verdict_to_proto(verdict: Verdict) -> quota_pb2.ReserveResponse:
    response = quota_pb2.ReserveResponse(
        decision=DECISIONS[verdict.decision],
        held=verdict.held,
        granted_tokens=verdict.tokens,
        repeat=verdict.repeat,
        running=verdict.running,
        answer=verdict.answer,
        violations=[
            quota_pb2.QuotaViolation(limit=v.limit, current=v.current, maximum=v.maximum)
            for v in verdict.violations
        ],
    )
    set_seconds(response.retry_after, verdict.retry_after_s)
    return response


class QuotaServicer(quota_pb2_grpc.QuotaServicer):
    """Reached only by services holding the service token (ferryman_server.kernel.security); it still
    refuses out-of-bounds calls (negative or unbounded charges) with INVALID_ARGUMENT."""

    def __init__(self, service: QuotaService) -> None:
        self._service = service

    async def _reserve(self, request: quota_pb2.ReserveRequest) -> quota_pb2.ReserveResponse:
        ask = Ask(
            request.estimated_tokens,
            request.estimated_cost_usd,
            request.min_tokens,
            request.cost_per_token_usd,
        )
        call = ReserveCall(
            request.request_id, request.tenant, request.model, ask, request.fingerprint, request.replayable
        )
        return verdict_to_proto(await self._service.reserve(call))

    async def Reserve(
        self, request: quota_pb2.ReserveRequest, context: ServicerContext
    ) -> quota_pb2.ReserveResponse:
        try:
            return await self._reserve(request)
        except InvalidQuotaCall as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            raise
        except QuotaUnavailable as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
            raise

    async def ReserveMany(
        self, request: quota_pb2.ReserveManyRequest, context: ServicerContext
    ) -> quota_pb2.ReserveManyResponse:
        if len(request.calls) > MAX_RESERVE_MANY:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"at most {MAX_RESERVE_MANY} reservations a call"
            )
        results = await asyncio.gather(*(self._result(call) for call in request.calls))
        return quota_pb2.ReserveManyResponse(results=results)

    async def _result(self, request: quota_pb2.ReserveRequest) -> quota_pb2.ReserveResult:
        """One call of a ReserveMany: its verdict, or what it alone would have failed with."""
        try:
            return quota_pb2.ReserveResult(verdict=await self._reserve(request))
        except InvalidQuotaCall as exc:
            return quota_pb2.ReserveResult(error=make_status(grpc.StatusCode.INVALID_ARGUMENT, str(exc)))
        except QuotaUnavailable as exc:
            return quota_pb2.ReserveResult(error=make_status(grpc.StatusCode.UNAVAILABLE, str(exc)))

    async def Renew(
        self, request: quota_pb2.RenewRequest, context: ServicerContext
    ) -> quota_pb2.RenewResponse:
        try:
            renewed = await self._service.renew(list(request.request_ids))
        except InvalidQuotaCall as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            raise
        return quota_pb2.RenewResponse(renewed=renewed)

    async def Commit(
        self, request: quota_pb2.CommitRequest, context: ServicerContext
    ) -> quota_pb2.SettleResponse:
        try:
            applied = await self._service.commit(
                request.request_id, request.actual_tokens, request.actual_cost_usd, request.answer
            )
        except InvalidQuotaCall as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            raise
        return quota_pb2.SettleResponse(applied=applied)

    async def Release(
        self, request: quota_pb2.ReleaseRequest, context: ServicerContext
    ) -> quota_pb2.SettleResponse:
        try:
            applied = await self._service.release(request.request_id)
        except InvalidQuotaCall as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            raise
        return quota_pb2.SettleResponse(applied=applied)

    async def Charge(
        self, request: quota_pb2.ChargeRequest, context: ServicerContext
    ) -> quota_pb2.ChargeResponse:
        try:
            charged, over = await self._service.charge(
                request.charge_id, request.tenant, request.model, request.total_cost_usd
            )
        except InvalidQuotaCall as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            raise
        except QuotaUnavailable as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
            raise
        return quota_pb2.ChargeResponse(charged_usd=charged, over_limit=over)

    async def GetUsage(
        self, request: quota_pb2.GetUsageRequest, context: ServicerContext
    ) -> quota_pb2.GetUsageResponse:
        rows, expired = await self._service.usage(request.tenant)
        return quota_pb2.GetUsageResponse(
            tenant=request.tenant,
            limits=[quota_pb2.LimitUsage(limit=n, current=c, maximum=m, mode=mode) for n, c, m, mode in rows],
            expired_reservations=expired,
        )
