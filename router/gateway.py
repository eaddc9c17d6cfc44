"""The Inference API, transport-neutral: authentication, deadlines, the request's root
span, metrics and logs around ``RouterService``, stream multiplexing, and the model
catalogue. Front doors (ferryman.v1 and OIP over gRPC, OIP REST and OpenAI over HTTP) only
convert their wire format to these calls, and ``RequestFailed`` statuses back."""

from __future__ import annotations

import asyncio
import logging
import time
import typing
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from google.rpc import status_pb2
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode

from ferryman.durations import seconds_of
from ferryman.errors import Reason, status_code
from ferryman.v1 import common_pb2, inference_pb2
from ferryman_server.kernel.logs import log_request
from ferryman_server.kernel.telemetry import current_span, exemplar, tracer
from ferryman_server.registry.cache import SnapshotCache
from ferryman_server.registry.snapshot import RouteRecord, TenantRecord
from ferryman_server.router.auth import authenticate
from ferryman_server.router.bounds import clip
from ferryman_server.router.catalog import ModelCatalog
from ferryman_server.router.door_limit import DoorLimit
from ferryman_server.router.failures import RequestFailed, fail, internal
from ferryman_server.router.generation import Generator
from ferryman_server.router.metrics import GENERATE, PREDICT, RouterMetrics
from ferryman_server.router.routing import Choice
from ferryman_server.router.service import RouterService
from ferryman_server.router.settings import RouterSettings
from ferryman_server.router.spans import (
    Door,
    Protocol,
    grpc_door,
    is_server_fault,
    server_address,
)
from ferryman_server.router.spill import Spill
from ferryman_server.router.statistics import Statistics, VersionStats

log = logging.getLogger("ferryman.router")


@dataclass(frozen=True)
class Rejected:
    """A stream request its door could not convert: answered with ``status``, never run."""

    request_id: str
    status: status_pb2.Status


StreamItem = inference_pb2.PredictRequest | Rejected
NATIVE_PREDICT = grpc_door(Protocol.FERRYMAN, "ferryman.v1.Inference", "Predict")
NATIVE_STREAM = grpc_door(Protocol.FERRYMAN, "ferryman.v1.Inference", "PredictStream")
NATIVE_GENERATE = grpc_door(Protocol.FERRYMAN, "ferryman.v1.Inference", "Generate")
UNKNOWN_LABEL = "-"
"""The model label of requests for a model that does not exist (or the tenant may not see)."""


def own_deadline(
    request: inference_pb2.PredictRequest | inference_pb2.GenerateRequest, call_deadline: float
) -> float:
    """The request's deadline (event-loop time): its own ``timeout`` if set, within the call's."""
    if not request.HasField("timeout"):
        return call_deadline
    own = asyncio.get_running_loop().time() + seconds_of(request.timeout)
    return min(call_deadline, own)


class AnswerHook(typing.Protocol):
    """Told of every answered Predict (shadow traffic, feedback); must not block."""

    def __call__(
        self,
        tenant: TenantRecord,
        route: RouteRecord | None,
        request: inference_pb2.PredictRequest,
        response: inference_pb2.PredictResponse,
    ) -> None: ...


class Gateway:
    """What every front door calls; failures raise ``RequestFailed`` with the status to send."""

    def __init__(
        self,
        settings: RouterSettings,
        cache: SnapshotCache,
        service: RouterService,
        generator: Generator,
        metrics: RouterMetrics,
        on_answer: Sequence[AnswerHook] = (),
        spill: Spill | None = None,
    ) -> None:
        self._settings = settings
        self._spill = spill
        """Turns refusals into durable jobs for requests that ask (None: no job queue)."""
        self._on_answer = tuple(on_answer)
        self._cache = cache
        self._service = service
        self._generator = generator
        self._metrics = metrics
        self._tracer = tracer("ferryman.router")
        self._statistics = Statistics()
        self._door = DoorLimit(settings, metrics)
        self.catalog = ModelCatalog(cache)
        """The models, versions and readiness a tenant may see (what doors describe)."""
        self._server = {False: server_address(settings.listen), True: server_address(settings.http_listen)}
        """Span attributes of the port each kind of door listens on (gRPC: False, HTTP: True)."""

    def listening(self, address: str, http: bool = False) -> None:
        """The address a kind of door was bound to (a port 0 in the settings becomes real)."""
        self._server[http] = server_address(address)

    def tenant(self, key: str | None, protocol: Protocol = Protocol.FERRYMAN) -> TenantRecord:
        """The tenant of a bearer key (None: none was sent); refusals are counted by door."""
        tenant = authenticate(self._cache.snapshot, key) if key else None
        if tenant is None:
            self._metrics.child(self._metrics.auth_failures, protocol).inc()
            reason = "missing API key" if not key else "unknown or revoked API key"
            raise fail(grpc.StatusCode.UNAUTHENTICATED, reason, Reason.UNAUTHENTICATED)
        return tenant

    def _labels(self, model: str, version: str) -> tuple[str, str]:
        """Metric labels of a failed request's model and version: its own only when they
        exist, so made-up names cannot grow the label sets (they share UNKNOWN_LABEL)."""
        snapshot = self._cache.snapshot
        if model not in snapshot.routes:
            return UNKNOWN_LABEL, ""
        return model, version if f"{model}:{version}" in snapshot.versions else ""

    def deadline(self, remaining_s: float | None) -> float:
        """The call's deadline (event-loop time) from the time its caller gave (None: the default)."""
        budget = self._settings.default_timeout_s if remaining_s is None else remaining_s
        return asyncio.get_running_loop().time() + budget

    async def predict(
        self,
        request: inference_pb2.PredictRequest,
        tenant: TenantRecord,
        call_deadline: float,
        parent: Context,
        door: Door = NATIVE_PREDICT,
    ) -> inference_pb2.PredictResponse:
        """One request, within its own deadline and the call's; ``door`` names the way in."""
        return await self._predict(request, tenant, own_deadline(request, call_deadline), parent, door)

    async def _predict(
        self,
        request: inference_pb2.PredictRequest,
        tenant: TenantRecord,
        deadline: float,
        parent: Context,
        door: Door,
    ) -> inference_pb2.PredictResponse:
        """One request; one that may spill into a job does so when refused for load."""
        if self._spill is None or not self._spill.wanted(request, tenant):
            return await self._answer(request, tenant, deadline, parent, door)
        return await self._spill.run(
            tenant, request, deadline, lambda at: self._answer(request, tenant, at, parent, door)
        )

    def _root(self, door: Door, parent: Context, tenant: str, model: str, **extra: object) -> Any:
        """The root span of a request that came in through ``door``."""
        return current_span(
            self._tracer,
            door.span_name,
            context=parent,
            kind=SpanKind.SERVER,
            # The status follows the conventions below (a caller's mistake is no error).
            record_exception=False,
            set_status_on_exception=False,
            attributes={
                **door.attributes,
                **self._server[door.http],
                "gen_ai.request.model": model,
                "ferryman.tenant": tenant,
                "ferryman.model": model,
                "ferryman.protocol": door.protocol.value,
                **extra,
            },
        )

    def _refused(
        self,
        span: Any,
        door: Door,
        tenant: str,
        request: inference_pb2.PredictRequest | inference_pb2.GenerateRequest,
        status: status_pb2.Status,
        started: float,
        served: Choice | None = None,
    ) -> None:
        """Metrics, span status and log line of a request that ended with an error ``status``
        (counted against the version that ran it, when one did)."""
        code = status_code(status).name
        elapsed = time.perf_counter() - started
        model_label, version_label = (
            (served.model, served.version) if served else self._labels(request.model, request.version)
        )
        kind = GENERATE if isinstance(request, inference_pb2.GenerateRequest) else PREDICT
        self._metrics.observe(
            tenant, model_label, version_label, code, door.protocol, elapsed, kind, exemplar(span)
        )
        span.set_attributes(door.failure(status))
        if is_server_fault(status_code(status)):
            span.set_status(Status(StatusCode.ERROR, status.message))
        log_request(tenant, request.model, version_label, request.request_id, code, elapsed)

    async def generate(
        self,
        request: inference_pb2.GenerateRequest,
        tenant: TenantRecord,
        call_deadline: float,
        parent: Context,
        door: Door = NATIVE_GENERATE,
    ) -> AsyncGenerator[inference_pb2.GenerateResponse]:
        """One generation's answers, within its own deadline and the call's. A refusal before
        the first answer raises RequestFailed; close it (``aclose``) when the caller leaves."""
        started = time.perf_counter()
        deadline = own_deadline(request, call_deadline)
        operation = "chat" if request.messages else "text_completion"
        attributes: Mapping[str, object] = {
            "gen_ai.operation.name": operation,
            "gen_ai.request.max_tokens": request.max_tokens,
            "gen_ai.request.temperature": request.sampling.temperature,
        }
        with self._root(door, parent, tenant.name, request.model, **attributes) as span:
            answers = self._generator.generate(request, tenant, deadline)
            last: inference_pb2.GenerateResponse | None = None
            first_at = 0.0
            try:
                async for answer in answers:
                    last = answer
                    if not first_at and answer.token_ids:
                        first_at = time.perf_counter()
                        ttft = self._metrics.child(self._metrics.ttft, answer.model, answer.version)
                        ttft.observe(first_at - started, exemplar(span))
                    yield answer
            except RequestFailed as failed:
                self._refused(span, door, tenant.name, request, failed.status, started)
                raise
            finally:
                await answers.aclose()
            self._generated(span, door, tenant.name, last, started, first_at)

    def _generated(
        self,
        span: Any,
        door: Door,
        tenant: str,
        last: inference_pb2.GenerateResponse | None,
        started: float,
        first_at: float,
    ) -> None:
        """Metrics, span attributes and log line of a generation that streamed to its end."""
        if last is None or not last.finish_reason:
            return
        now = time.perf_counter()
        elapsed = now - started
        if first_at and last.usage.output_tokens > 1:
            tpot = self._metrics.child(self._metrics.tpot, last.model, last.version)
            tpot.observe((now - first_at) / (last.usage.output_tokens - 1), exemplar(span))
        finish = common_pb2.FinishReason.Name(last.finish_reason).removeprefix("FINISH_REASON_").lower()
        span.set_attributes(
            {
                "ferryman.request_id": last.request_id,
                "ferryman.version": last.version,
                "ferryman.served_model": last.model,
                "ferryman.fallback": last.fallback,
                "gen_ai.response.finish_reasons": [finish],
                "gen_ai.usage.input_tokens": last.usage.input_tokens,
                "gen_ai.usage.output_tokens": last.usage.output_tokens,
                **door.success,
            }
        )
        self._metrics.observe(
            tenant, last.model, last.version, "OK", door.protocol, elapsed, GENERATE, exemplar(span)
        )
        log_request(tenant, last.model, last.version, last.request_id, "OK", elapsed)

    async def _answer(
        self,
        request: inference_pb2.PredictRequest,
        tenant: TenantRecord,
        deadline: float,
        parent: Context,
        door: Door,
    ) -> inference_pb2.PredictResponse:
        """RouterService.predict inside the request's root span, measured and logged, once
        the door's concurrency limit admits it."""
        started = time.perf_counter()
        protocol = door.protocol
        budget = deadline - asyncio.get_running_loop().time()
        # Refused at the door: no span, no metrics, no log line (the door counts it).
        with (
            self._door.admitted(tenant.name, budget),
            self._root(door, parent, tenant.name, request.model) as span,
        ):
            try:
                response = await self._service.predict(request, tenant, deadline)
            except RequestFailed as failed:
                served = failed.served
                model, version = (
                    (served.model, served.version) if served else (request.model, request.version)
                )
                if f"{model}:{version}" in self._cache.snapshot.versions:
                    # Per-version statistics: a failure has a version once one ran it (or was pinned).
                    elapsed = time.perf_counter() - started
                    self._statistics.failed(tenant.name, model, version, elapsed)
                self._refused(span, door, tenant.name, request, failed.status, started, served)
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
                    **door.success,
                }
            )
            self._metrics.observe(
                tenant.name,
                response.model,
                response.version,
                "OK",
                protocol,
                elapsed,
                PREDICT,
                exemplar(span),
            )
            queued = seconds_of(response.timing.queue)
            self._metrics.child(self._metrics.service, response.model, response.version).observe(
                elapsed - queued
            )
            self._statistics.answered(tenant.name, response, elapsed)
            log_request(tenant.name, response.model, response.version, response.request_id, "OK", elapsed)
        if self._on_answer:
            route = self._cache.snapshot.routes.get(request.model)
            for hook in self._on_answer:
                hook(tenant, route, request, response)
        return response

    async def predict_stream(
        self,
        request_iterator: AsyncIterator[StreamItem],
        tenant: TenantRecord,
        deadline: float,
        parent: Context,
        door: Door = NATIVE_STREAM,
    ) -> AsyncGenerator[inference_pb2.PredictStreamResponse]:
        """Answer many requests of one call as each is ready; one request's failure is its
        own answer, never the call's. Close it (``aclose``) when the caller leaves: that
        cancels the requests still running."""
        # Every answer task puts exactly one answer; the reader puts None when the requests end.
        answers: asyncio.Queue[inference_pb2.PredictStreamResponse | None] = asyncio.Queue()
        running: set[asyncio.Task[None]] = set()
        started = 0

        async def answer(request: StreamItem) -> None:
            if isinstance(request, Rejected):
                answers.put_nowait(
                    inference_pb2.PredictStreamResponse(request_id=request.request_id, error=request.status)
                )
                return
            try:
                own = own_deadline(request, deadline)
                response = await self._predict(request, tenant, own, parent, door)
                answers.put_nowait(
                    inference_pb2.PredictStreamResponse(request_id=response.request_id, response=response)
                )
            except RequestFailed as failed:
                answers.put_nowait(
                    inference_pb2.PredictStreamResponse(request_id=request.request_id, error=failed.status)
                )
            except Exception:  # one request's bug must not end the others' stream
                status = internal(log, f"request {clip(request.request_id)!r} failed")
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

    @property
    def max_message_bytes(self) -> int:
        """The largest request a door accepts."""
        return self._settings.max_message_bytes

    @property
    def serving(self) -> bool:
        """The registry was read: requests can be routed."""
        return self._cache.loaded.is_set()

    def statistics(self, tenant: TenantRecord, model: str) -> dict[str, VersionStats]:
        """The tenant's own request statistics of a model it may use, by version."""
        self.catalog.get_model(tenant, model)
        return self._statistics.of(tenant.name, model)
