"""One request through the router: route, validate, reserve quota, batch, settle."""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass
from datetime import timedelta

import grpc

from ferryman.durations import set_seconds
from ferryman.errors import Reason, expected_wait_s
from ferryman.v1 import batcher_pb2, common_pb2, inference_pb2
from ferryman_server.kernel.quota import Ask, Decision, Verdict
from ferryman_server.kernel.schema_check import check_inputs
from ferryman_server.kernel.telemetry import traceparent, tracer
from ferryman_server.registry.cache import SnapshotCache
from ferryman_server.registry.snapshot import TenantRecord, VersionRecord
from ferryman_server.registry.states import ModelFormat
from ferryman_server.router.batchers import BatcherPort, set_deadline
from ferryman_server.router.bounds import check_request, clip
from ferryman_server.router.failures import RequestFailed, fail, unknown_model
from ferryman_server.router.fingerprint import fingerprint
from ferryman_server.router.metrics import RouterMetrics
from ferryman_server.router.reservations import Reservations
from ferryman_server.router.routing import Choice, resolve
from ferryman_server.router.settings import RouterSettings
from ferryman_server.router.shedding import Shedder
from ferryman_server.router.validation import price, token_bound

log = logging.getLogger("ferryman.router")


@dataclass(frozen=True)
class Admitted:
    choice: Choice
    version: VersionRecord
    rows: int
    tokens: int
    cost: float
    priority: common_pb2.Priority


def shed_key(tenant: str, admitted: Admitted) -> str:
    """Shedding is learnt per tenant and version: the batcher queues tenants fairly, so one
    tenant's backlog (and the latency it sees) says nothing about another's."""
    return f"{tenant}/{admitted.choice.key}"


class RouterService:
    def __init__(
        self,
        settings: RouterSettings,
        cache: SnapshotCache,
        reservations: Reservations,
        batchers: BatcherPort,
        metrics: RouterMetrics,
    ) -> None:
        self._settings = settings
        self._metrics = metrics
        self._tracer = tracer("ferryman.router")
        self._cache = cache
        self._reservations = reservations
        self._batchers = batchers
        self._shedder = Shedder(settings.shed_smoothing)

    def route(
        self, tenant: TenantRecord, model: str, pin: str, user: str, degrade: bool, fallback: bool = True
    ) -> tuple[Choice, VersionRecord]:
        """The version a request of ``tenant`` for ``model`` goes to (weights, sticky user,
        pin, fallback; the allow-list holds throughout). Unknown and forbidden models raise alike.
        ``fallback`` False: the model's own version even when no replica serves it now (a
        job runs later)."""
        snapshot = self._cache.snapshot
        if not snapshot.may_use(tenant, model) or (
            model not in snapshot.routes and not (pin and f"{model}:{pin}" in snapshot.versions)
        ):
            raise unknown_model(model)
        try:
            choice = resolve(
                snapshot.routes,
                model,
                tenant=tenant.name,
                user=user,
                pin=pin,
                is_ready=self._cache.is_ready if fallback else lambda _model, _version: True,
                may_use=lambda name: snapshot.may_use(tenant, name),
                degrade=degrade,
            )
        except LookupError:
            raise unknown_model(model) from None
        version = snapshot.versions.get(choice.key)
        if version is None or version.status == "RETIRED":
            raise fail(
                grpc.StatusCode.NOT_FOUND,
                f"unknown version {clip(choice.model)}:{clip(choice.version)}",
                Reason.UNKNOWN_VERSION,
            )
        return choice, version

    def _check(self, request: inference_pb2.PredictRequest, tenant: TenantRecord, degrade: bool) -> Admitted:
        if bad := check_request(request):
            raise fail(
                grpc.StatusCode.INVALID_ARGUMENT,
                "; ".join(f"{f}: {d}" for f, d in bad),
                Reason.INVALID_REQUEST,
                violations=bad,
            )
        choice, version = self.route(tenant, request.model, request.version, request.user, degrade)
        if version.format == ModelFormat.CAUSAL_LM:
            raise fail(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"{clip(choice.model)} generates text: call Generate",
                Reason.INVALID_REQUEST,
            )
        checked = check_inputs(request.inputs, version.schema)
        rows, violations = checked.rows, checked.violations
        if violations:
            raise fail(
                grpc.StatusCode.INVALID_ARGUMENT,
                "; ".join(f"{f}: {d}" for f, d in violations),
                Reason.INVALID_INPUT,
                violations=violations,
            )
        tokens = token_bound(request.inputs)
        cost = price(rows, tokens, version.price_per_item_usd, version.price_per_1k_tokens_usd)
        priority = request.priority or tenant.priority
        return Admitted(choice, version, rows, tokens, cost, priority)  # type: ignore[arg-type]

    async def predict(
        self,
        request: inference_pb2.PredictRequest,
        tenant: TenantRecord,
        deadline: float,
    ) -> inference_pb2.PredictResponse:
        """Answer one request before ``deadline`` (event-loop time) or raise RequestFailed."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        if deadline <= started:
            raise fail(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                "the deadline passed before the request arrived",
                Reason.DEADLINE,
            )
        # An id the client sent may come again (a retry): it buys one request, for every
        # tenant, with or without limits. Only an id the application chose (an idempotency
        # key) keeps its answer for repeats: a client library's own id only binds.
        replayable = bool(request.request_id)
        keep = replayable and not request.generated_request_id
        request_id = request.request_id or uuid.uuid4().hex
        quota_id = f"{tenant.name}/{request_id}"
        admitted = self._check(request, tenant, degrade=False)
        checked_at = self._shed(tenant.name, admitted, deadline)
        verdict = await self._reservations.reserve(
            quota_id,
            tenant.name,
            admitted.choice.model,
            Ask(admitted.tokens, admitted.cost),
            lambda: fingerprint(request),
            deadline,
            replayable=replayable,
        )
        if verdict.repeat:
            return inference_pb2.PredictResponse.FromString(verdict.answer)
        # A held reservation ends with the request, however it ends: answer, error, the
        # client's cancel or deadline. Leases cover the one way this cannot see: a crash.
        try:
            response = await self._serve(
                request_id, request, tenant, admitted, deadline, verdict, started, checked_at
            )
        except BaseException:
            if verdict.held:
                self._reservations.release_later(quota_id)
            raise
        if verdict.held:
            usage = response.usage
            answer = response.SerializeToString() if keep else b""
            self._reservations.commit_later(quota_id, usage.input_tokens, usage.cost_usd, answer)
        return response

    async def _serve(
        self,
        request_id: str,
        request: inference_pb2.PredictRequest,
        tenant: TenantRecord,
        admitted: Admitted,
        deadline: float,
        verdict: Verdict,
        started: float,
        checked_at: float,
    ) -> inference_pb2.PredictResponse:
        """Run an admitted request and build its answer; failures raise RequestFailed.

        ``started``: when the request arrived (its total time); ``checked_at``: when it was
        admitted (the latency the shedder learns)."""
        loop = asyncio.get_running_loop()
        if verdict.decision == Decision.DEGRADE:
            admitted = self._degrade(request, tenant, admitted)
        result = await self._run(request_id, request, tenant, admitted, deadline)
        if result.status.code != 0:
            if (wait := expected_wait_s(result.status)) is not None:
                self._shedder.record(shed_key(tenant.name, admitted), wait, loop.time())
            raise RequestFailed(result.status, served=admitted.choice)
        tokens = result.usage.input_tokens + result.usage.output_tokens or admitted.tokens
        cost = price(
            admitted.rows,
            tokens,
            admitted.version.price_per_item_usd,
            admitted.version.price_per_1k_tokens_usd,
        )
        self._shedder.observe(shed_key(tenant.name, admitted), loop.time() - checked_at)
        response = inference_pb2.PredictResponse(
            request_id=request_id,
            model=admitted.choice.model,
            version=admitted.choice.version,
            fallback=admitted.choice.fallback,
            outputs=result.outputs,
            usage=common_pb2.Usage(
                items=admitted.rows,
                input_tokens=tokens,
                output_tokens=result.usage.output_tokens,
                cost_usd=cost,
            ),
            timing=result.timing,
            coalesced=result.coalesced,
            cached=result.cached,
        )
        set_seconds(response.timing.total, loop.time() - started)
        self._metrics.served(
            tenant.name,
            admitted.choice.model,
            response.usage,
            fallback_of=request.model if admitted.choice.fallback else "",
        )
        return response

    def _shed(self, tenant: str, admitted: Admitted, deadline: float) -> float:
        """Refuse at once a request that cannot make its deadline (router/shedding.py).

        Returns the check's time, from which the answer's latency is measured."""
        now = asyncio.get_running_loop().time()
        if not self._settings.shed_overload:
            return now
        key, budget = shed_key(tenant, admitted), deadline - now
        wait = self._shedder.wait(key, budget, now)
        if wait is not None:
            self._metrics.child(self._metrics.shed, admitted.choice.model, admitted.choice.version).inc()
            if self._shedder.unmeetable(key, budget):
                raise fail(
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    f"{admitted.choice.key} has never answered within {budget * 1000:.1f} ms, this "
                    "request's deadline",
                    Reason.DEADLINE_TOO_SHORT,
                )
            raise fail(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"{admitted.choice.key} is overloaded: expected latency {wait * 1000:.0f} ms "
                "exceeds this request's deadline",
                Reason.OVERLOADED,
                retry_after=timedelta(seconds=wait),
            )
        return now

    def _degrade(
        self, request: inference_pb2.PredictRequest, tenant: TenantRecord, admitted: Admitted
    ) -> Admitted:
        """Over a soft limit: the route's fallback model if it takes this input, else low priority."""
        try:
            degraded = self._check(request, tenant, degrade=True)
        except RequestFailed:
            degraded = admitted
        if degraded.choice.fallback:
            return degraded
        return Admitted(
            admitted.choice,
            admitted.version,
            admitted.rows,
            admitted.tokens,
            admitted.cost,
            common_pb2.PRIORITY_LOW,
        )

    async def _run(
        self,
        request_id: str,
        request: inference_pb2.PredictRequest,
        tenant: TenantRecord,
        admitted: Admitted,
        deadline: float,
    ) -> batcher_pb2.ItemResult:
        remaining = deadline - asyncio.get_running_loop().time()
        item = batcher_pb2.SubmitItem(
            request_id=f"{tenant.name}/{request_id}/{uuid.uuid4().hex[:8]}",
            tenant=tenant.name,
            weight=tenant.weight,
            model=admitted.choice.model,
            version=admitted.choice.version,
            parameters=request.parameters,
            priority=admitted.priority,
            inputs=request.inputs,
            traceparent=traceparent(),  # the request span: queue and batch spans join its trace
        )
        return await self._batchers.submit(set_deadline(item, remaining), deadline)
