"""The public Inference servicer: authentication and deadlines around RouterService."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator

import grpc
from google.rpc import status_pb2
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode

from ferryman.errors import Reason, abort, make_status, status_code
from ferryman.logs import log_request
from ferryman.serving import ServicerContext
from ferryman.telemetry import context_from_metadata, current_span, tracer
from ferryman.v1 import inference_pb2, inference_pb2_grpc
from registry.cache import SnapshotCache
from registry.snapshot import TenantRecord
from router.auth import authenticate, bearer_key
from router.bounds import clip
from router.handlers import Undecodable
from router.metrics import RouterMetrics
from router.service import RequestFailed, RouterService
from router.settings import RouterSettings

log = logging.getLogger("ferryman.router")


def undecodable(request: Undecodable) -> status_pb2.Status:
    return make_status(
        grpc.StatusCode.INVALID_ARGUMENT,
        f"the request could not be parsed: {request.reason}",
        reason=Reason.UNDECODABLE,
        violations=[("request", request.reason)],
    )


def own_deadline(request: inference_pb2.PredictRequest, call_deadline: float) -> float:
    """The request's deadline (event-loop time): its own ``timeout`` if set, within the call's."""
    if not request.HasField("timeout"):
        return call_deadline
    own = asyncio.get_running_loop().time() + request.timeout.ToTimedelta().total_seconds()
    return min(call_deadline, own)


class InferenceServicer(inference_pb2_grpc.InferenceServicer):
    def __init__(
        self, settings: RouterSettings, cache: SnapshotCache, service: RouterService, metrics: RouterMetrics
    ) -> None:
        self._settings = settings
        self._cache = cache
        self._service = service
        self._metrics = metrics
        self._tracer = tracer("ferryman.router")

    async def _predict(
        self, request: inference_pb2.PredictRequest, tenant: TenantRecord, deadline: float, parent: Context
    ) -> inference_pb2.PredictResponse:
        """RouterService.predict inside the request's root span, measured and logged."""
        started = time.perf_counter()
        with current_span(
            self._tracer,
            "router.Predict",
            context=parent,
            kind=SpanKind.SERVER,
            attributes={"ferryman.tenant": tenant.name, "ferryman.model": request.model},
        ) as span:
            try:
                response = await self._service.predict(request, tenant, deadline)
            except RequestFailed as failed:
                code = status_code(failed.status).name
                elapsed = time.perf_counter() - started
                self._metrics.observe(tenant.name, request.model, request.version, code, elapsed)
                span.set_status(Status(StatusCode.ERROR, failed.status.message))
                span.set_attribute("rpc.grpc.status_code", failed.status.code)
                log_request(tenant.name, request.model, request.version, request.request_id, code, elapsed)
                raise
            elapsed = time.perf_counter() - started
            span.set_attributes(
                {
                    "ferryman.request_id": response.request_id,
                    "ferryman.version": response.version,
                    "ferryman.served_model": response.model,
                    "ferryman.fallback": response.fallback,
                    "ferryman.coalesced": response.coalesced,
                    "ferryman.cached": response.cached,
                    "gen_ai.usage.input_tokens": response.usage.input_tokens,
                    "gen_ai.usage.output_tokens": response.usage.output_tokens,
                }
            )
            self._metrics.observe(tenant.name, response.model, response.version, "OK", elapsed)
            log_request(tenant.name, response.model, response.version, response.request_id, "OK", elapsed)
        return response

    async def _tenant(self, context: ServicerContext) -> TenantRecord:
        key = bearer_key(context.invocation_metadata())
        tenant = authenticate(self._cache.snapshot, key) if key else None
        if tenant is None:
            reason = "missing API key" if not key else "unknown or revoked API key"
            status = make_status(grpc.StatusCode.UNAUTHENTICATED, reason, reason=Reason.UNAUTHENTICATED)
            await abort(context, status)
            raise AssertionError("abort raises")
        return tenant

    def _deadline(self, context: ServicerContext) -> float:
        remaining = context.time_remaining()
        budget = self._settings.default_timeout_s if remaining is None else remaining
        return asyncio.get_running_loop().time() + budget

    async def Predict(
        self, request: inference_pb2.PredictRequest, context: ServicerContext
    ) -> inference_pb2.PredictResponse:
        tenant = await self._tenant(context)
        if isinstance(request, Undecodable):
            await abort(context, undecodable(request))
        try:
            parent = context_from_metadata(context.invocation_metadata())
            deadline = own_deadline(request, self._deadline(context))
            return await self._predict(request, tenant, deadline, parent)
        except RequestFailed as failed:
            await abort(context, failed.status)
            raise

    async def PredictStream(
        self, request_iterator: AsyncIterator[inference_pb2.PredictRequest], context: ServicerContext
    ) -> AsyncIterator[inference_pb2.PredictStreamResponse]:
        tenant = await self._tenant(context)
        deadline = self._deadline(context)
        parent = context_from_metadata(context.invocation_metadata())
        # Every answer task puts exactly one answer; the reader puts None when the requests end.
        answers: asyncio.Queue[inference_pb2.PredictStreamResponse | None] = asyncio.Queue()
        running: set[asyncio.Task[None]] = set()
        started = 0

        async def answer(request: inference_pb2.PredictRequest | Undecodable) -> None:
            if isinstance(request, Undecodable):
                answers.put_nowait(inference_pb2.PredictStreamResponse(error=undecodable(request)))
                return
            try:
                response = await self._predict(request, tenant, own_deadline(request, deadline), parent)
                answers.put_nowait(
                    inference_pb2.PredictStreamResponse(request_id=response.request_id, response=response)
                )
            except RequestFailed as failed:
                answers.put_nowait(
                    inference_pb2.PredictStreamResponse(request_id=request.request_id, error=failed.status)
                )
            except Exception as exc:  # one request's bug must not end the others' stream
                log.exception("request %s failed", request.request_id)
                status = make_status(
                    grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}", reason=Reason.INTERNAL
                )
                answers.put_nowait(
                    inference_pb2.PredictStreamResponse(request_id=request.request_id, error=status)
                )

        async def read() -> None:
            nonlocal started
            try:
                async for request in request_iterator:
                    task = asyncio.create_task(answer(request))
                    running.add(task)
                    task.add_done_callback(running.discard)
                    started += 1
            finally:
                answers.put_nowait(None)

        reader = asyncio.create_task(read())
        try:
            sent, reading = 0, True
            while reading or sent < started:
                item = await answers.get()
                if item is None:
                    reading = False
                    continue
                yield item
                sent += 1
            reader.result()  # a broken request stream ends the call with its error
        finally:
            reader.cancel()
            for task in running:
                task.cancel()

    async def ListModels(
        self, request: inference_pb2.ListModelsRequest, context: ServicerContext
    ) -> inference_pb2.ListModelsResponse:
        tenant = await self._tenant(context)
        snapshot = self._cache.snapshot
        visible = [n for n in sorted(snapshot.routes) if snapshot.may_use(tenant, n)]
        return inference_pb2.ListModelsResponse(models=[self._model_info(n) for n in visible])

    async def GetModel(
        self, request: inference_pb2.GetModelRequest, context: ServicerContext
    ) -> inference_pb2.ModelInfo:
        tenant = await self._tenant(context)
        snapshot = self._cache.snapshot
        # Unknown and forbidden answer alike, so model names do not leak across tenants.
        if request.model not in snapshot.routes or not snapshot.may_use(tenant, request.model):
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown model {clip(request.model)!r}")
        return self._model_info(request.model)

    def _model_info(self, model: str) -> inference_pb2.ModelInfo:
        snapshot = self._cache.snapshot
        route = snapshot.routes[model]
        weights = dict(route.targets)
        versions = [
            inference_pb2.VersionInfo(
                version=v.version,
                status=v.status,
                weight=weights.get(v.version, 0),
                schema=v.schema.to_proto(),
            )
            for key, v in sorted(snapshot.versions.items())
            if v.model == model and v.status in ("ACTIVE", "DEPRECATED")
        ]
        return inference_pb2.ModelInfo(
            name=model,
            description=snapshot.descriptions.get(model, ""),
            versions=versions,
            fallback=route.fallback,
        )
