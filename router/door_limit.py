"""The adaptive concurrency limit (router/limiter.py) at the router's door: every front
door's request passes here first, once its tenant is known. A refusal is one prepared
status, one unlabelled counter and no span or log line: under overload, refusing must not
take the cores serving needs."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import grpc

from ferryman.errors import Reason, make_status, reason_of
from ferryman_server.router.failures import RequestFailed
from ferryman_server.router.limiter import AdaptiveLimit
from ferryman_server.router.metrics import RouterMetrics
from ferryman_server.router.settings import RouterSettings

LOAD_REFUSALS = frozenset({Reason.OVERLOADED, Reason.QUEUE_FULL})
"""Refusals further down that mean the platform held more than it could serve in time (a
quota refusal or a caller's mistake says nothing about load)."""


class DoorLimit:
    """Every request runs inside ``admitted()``, which refuses or counts it."""

    def __init__(self, settings: RouterSettings, metrics: RouterMetrics) -> None:
        self._limit = AdaptiveLimit(settings.limit_config()) if settings.adaptive_limit else None
        self._metrics = metrics
        self._refusal = make_status(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "the router is at its concurrency limit; retry shortly",
            reason=Reason.OVERLOADED,
            retry_after=timedelta(seconds=settings.limit_window_s),
        )
        self._stale = make_status(
            grpc.StatusCode.DEADLINE_EXCEEDED,
            "the request waited to be read until no answer could make its deadline",
            reason=Reason.DEADLINE_UNMEETABLE,
        )
        self._fastest_s: float | None = None
        """The fastest answer this router has given (any model), admission to answer."""
        limit = self._limit
        if limit is not None:
            metrics.concurrency_limit.set_function(lambda: limit.limit)

    @contextmanager
    def admitted(self, tenant: str, budget_s: float) -> Iterator[None]:
        """The block runs a request of ``tenant`` with ``budget_s`` left, once admitted.

        Raises RequestFailed instead when the request waited (in the transport, behind
        others: under overload, processing is first come first served) until not even the
        fastest answer yet could make its deadline (CoDel's rule: drop what waited too long,
        serve fresh work), or when the limit is reached."""
        if self._fastest_s is not None and budget_s < self._fastest_s:
            self._metrics.stale.inc()
            raise RequestFailed(self._stale)
        if self._limit is not None and not self._limit.try_acquire(tenant):
            self._metrics.limited.inc()
            raise RequestFailed(self._refusal)
        admitted_at = asyncio.get_running_loop().time()
        try:
            yield
        except BaseException as exc:
            self._done(tenant, admitted_at, exc)
            raise
        self._done(tenant, admitted_at, None)

    def _done(self, tenant: str, admitted_at: float, failure: BaseException | None) -> None:
        now = asyncio.get_running_loop().time()
        if failure is None:
            took = now - admitted_at
            self._fastest_s = took if self._fastest_s is None else min(self._fastest_s, took)
        if self._limit is None:
            return
        dropped = (
            isinstance(failure, RequestFailed)
            and failure.status.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
            and reason_of(failure.status) in LOAD_REFUSALS
        )
        self._limit.release(tenant, dropped, now)
