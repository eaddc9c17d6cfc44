"""Feedback: a tenant's outcome metric (a click, a conversion, a rating) for one of its own
answered requests, recorded against the version that served it.

The router remembers who was served by which version for requests to models whose route
splits traffic over versions (an experiment or a rollout), for ``feedback_window_s``:
in its memory, or in Redis when the routers share one (so any router takes the feedback).
A report names a request id; only the tenant that made the request finds it, each metric is
taken once per request and at most ``feedback_max_metrics`` metrics per request, so a
tenant can write no more outcomes than it had answers.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Protocol

import grpc
import redis.asyncio as aioredis

from ferryman.errors import Reason
from ferryman.v1 import inference_pb2
from ferryman_server.registry import validation as v
from ferryman_server.registry.snapshot import RouteRecord, TenantRecord
from ferryman_server.registry.tables import Feedback
from ferryman_server.registry.writer import RegistryWriter
from ferryman_server.router.bounds import MAX_REQUEST_ID_CHARS, clip
from ferryman_server.router.failures import fail
from ferryman_server.router.routing import sticky_point
from ferryman_server.router.settings import RouterSettings

log = logging.getLogger("ferryman.router.feedback")
MAX_ABS_VALUE = 1e12
REDIS_PREFIX = "ferryman:served:"
FLUSH_S = 0.05
"""How often remembered answers go to Redis, in one pipeline."""
REDIS_TIMEOUT_S = 0.5
MAX_PENDING = 100_000
"""Answers waiting for the next flush past which the oldest are dropped (Redis down)."""


@dataclass(frozen=True)
class Served:
    model: str
    version: str
    bucket: int
    """The caller's sticky bucket (0..99), -1 on a route that is not sticky."""


class ServedLog(Protocol):
    def remember(self, tenant: str, request_id: str, served: Served) -> None:
        """Note an answer (never blocks the request)."""

    async def recall(self, tenant: str, request_id: str) -> Served | None:
        """The version that answered this tenant's request, if within the window."""


class MemoryServedLog:
    """This router's answers, the newest ``max_entries`` within ``window_s``."""

    def __init__(
        self, window_s: float, max_entries: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._window_s = window_s
        self._max = max_entries
        self._clock = clock
        self._entries: OrderedDict[tuple[str, str], tuple[float, Served]] = OrderedDict()

    def remember(self, tenant: str, request_id: str, served: Served) -> None:
        key = (tenant, request_id)
        self._entries.pop(key, None)
        self._entries[key] = (self._clock() + self._window_s, served)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)

    async def recall(self, tenant: str, request_id: str) -> Served | None:
        found = self._entries.get((tenant, request_id))
        if found is None or found[0] < self._clock():
            return None
        return found[1]


def _redis_key(tenant: str, request_id: str) -> str:
    # Hashed: bounded key size whatever the id holds, and no separator a name could forge.
    return REDIS_PREFIX + hashlib.sha256(f"{tenant}\0{request_id}".encode()).hexdigest()


class RedisServedLog:
    """Answers in Redis with the window as their expiry, written in pipelined batches."""

    def __init__(self, url: str, window_s: float) -> None:
        self._redis = aioredis.from_url(url)
        self._window_s = window_s
        self._pending: OrderedDict[str, bytes] = OrderedDict()
        self._wake = asyncio.Event()

    def remember(self, tenant: str, request_id: str, served: Served) -> None:
        self._pending[_redis_key(tenant, request_id)] = json.dumps(asdict(served)).encode()
        while len(self._pending) > MAX_PENDING:
            self._pending.popitem(last=False)
        self._wake.set()

    async def recall(self, tenant: str, request_id: str) -> Served | None:
        key = _redis_key(tenant, request_id)
        if (pending := self._pending.get(key)) is not None:
            return Served(**json.loads(pending))
        async with asyncio.timeout(REDIS_TIMEOUT_S):
            raw = await self._redis.get(key)
            if raw is None:
                # Another router may still hold it for its next flush: look once more after it.
                await asyncio.sleep(FLUSH_S * 2)
                raw = await self._redis.get(key)
        return None if raw is None else Served(**json.loads(raw))

    async def run(self, stop: asyncio.Event) -> None:
        """Flush what was remembered until ``stop``; Redis down: keep it for the next try."""
        while not stop.is_set():
            await asyncio.sleep(FLUSH_S)
            if not self._pending:
                continue
            batch = list(self._pending.items())
            try:
                async with asyncio.timeout(REDIS_TIMEOUT_S):
                    pipe = self._redis.pipeline(transaction=False)
                    for key, value in batch:
                        pipe.set(key, value, ex=max(1, math.ceil(self._window_s)))
                    await pipe.execute()
            except (OSError, TimeoutError, aioredis.RedisError) as exc:
                log.warning("cannot write answers for feedback to Redis: %s", exc)
                continue
            for key, _ in batch:
                self._pending.pop(key, None)

    async def close(self) -> None:
        await self._redis.aclose()


def splits(route: RouteRecord) -> bool:
    """Whether the route sends traffic to more than one version (an experiment)."""
    return sum(1 for _, weight in route.targets if weight > 0) > 1


class FeedbackDesk:
    """Takes Feedback calls: checks them, finds the serving version, records once."""

    def __init__(self, settings: RouterSettings, served: ServedLog, writer: RegistryWriter) -> None:
        self._settings = settings
        self.served = served
        self._writer = writer

    def answered(
        self,
        tenant: TenantRecord,
        route: RouteRecord | None,
        request: inference_pb2.PredictRequest,
        response: inference_pb2.PredictResponse,
    ) -> None:
        """Remember an answer of a model under an experiment."""
        if route is None or not splits(route):
            return
        point = sticky_point(route, tenant=tenant.name, user=request.user)
        served = Served(response.model, response.version, -1 if point is None else point)
        self.served.remember(tenant.name, response.request_id, served)

    async def record(
        self, tenant: str, request: inference_pb2.FeedbackRequest
    ) -> inference_pb2.FeedbackResponse:
        """Record the outcome; raises RequestFailed with what to fix."""
        violations = check(request)
        if violations:
            raise fail(
                grpc.StatusCode.INVALID_ARGUMENT,
                "invalid feedback",
                Reason.INVALID_REQUEST,
                violations=violations,
            )
        try:
            served = await self.served.recall(tenant, request.request_id)
        except (OSError, TimeoutError, aioredis.RedisError) as exc:
            raise fail(
                grpc.StatusCode.UNAVAILABLE, f"feedback store unavailable: {exc}", Reason.INTERNAL
            ) from None
        if served is None:
            raise fail(
                grpc.StatusCode.NOT_FOUND,
                f"no answer to request {clip(request.request_id)!r} of this tenant within the last "
                f"{self._settings.feedback_window_s:g} s on a model under an experiment",
                Reason.UNKNOWN_REQUEST,
            )
        row = Feedback(
            tenant=tenant,
            request_id=request.request_id,
            model=served.model,
            version=served.version,
            bucket=served.bucket,
            metric=request.metric,
            value=request.value,
        )
        try:
            await asyncio.to_thread(self._writer.record_feedback, row, self._settings.feedback_max_metrics)
        except v.RegistryError as exc:
            raise fail(grpc.StatusCode.ALREADY_EXISTS, str(exc), Reason.FEEDBACK_RECORDED) from None
        return inference_pb2.FeedbackResponse(
            model=served.model, version=served.version, window_s=self._settings.feedback_window_s
        )


def check(request: inference_pb2.FeedbackRequest) -> list[tuple[str, str]]:
    """Violations of a Feedback request's fields."""
    violations: list[tuple[str, str]] = []
    if not request.request_id or len(request.request_id) > MAX_REQUEST_ID_CHARS:
        violations.append(("request_id", f"required, at most {MAX_REQUEST_ID_CHARS} characters"))
    if not v.VERSION_RE.match(request.metric):
        violations.append(("metric", "use 1-64 of A-Z, a-z, 0-9, '.', '_', '-'"))
    if not math.isfinite(request.value) or abs(request.value) > MAX_ABS_VALUE:
        violations.append(("value", f"a finite number within ±{MAX_ABS_VALUE:g}"))
    return violations
