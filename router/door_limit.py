"""The adaptive concurrency limit (router/limiter.py) at the router's door: every front
door's request passes here first, once its tenant is known. A refusal is one prepared
status, one unlabelled counter and no span or log line: under overload, refusing must not
take the cores serving needs."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import grpc

from ferryman.errors import Reason, make_status, reason_of
from router.limiter import AdaptiveLimit
from router.metrics import RouterMetrics
from router.service import RequestFailed
from router.settings import RouterSettings

LOAD_REFUSALS = frozenset({Reason.OVERLOADED, Reason.QUEUE_FULL})
"""Refusals further down that mean the platform held more than it could serve in time (a
quota refusal or a caller's mistake says nothing about load)."""


class DoorLimit:
    """``admit()`` before a request, ``done()`` after it, on every path."""

    def __init__(self, settings: RouterSettings, metrics: RouterMetrics) -> None:
        self._limit = AdaptiveLimit(settings.limit_config()) if settings.adaptive_limit else None
        self._metrics = metrics
        self._refusal = RequestFailed(
            make_status(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                "the router is at its concurrency limit; retry shortly",
                reason=Reason.OVERLOADED,
                retry_after=timedelta(seconds=settings.limit_window_s),
            )
        )
        limit = self._limit
        if limit is not None:
            metrics.concurrency_limit.set_function(lambda: limit.limit)

    def admit(self, tenant: str) -> None:
        """Admit a request of ``tenant``, or raise RequestFailed: the limit is reached."""
        if self._limit is not None and not self._limit.try_acquire(tenant):
            self._metrics.limited.inc()
            raise RequestFailed(self._refusal.status)

    def done(self, tenant: str, failure: BaseException | None) -> None:
        """An admitted request of ``tenant`` ended (``failure``: how, if it failed)."""
        if self._limit is None:
            return
        dropped = (
            isinstance(failure, RequestFailed)
            and failure.status.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
            and reason_of(failure.status) in LOAD_REFUSALS
        )
        self._limit.release(tenant, dropped, asyncio.get_running_loop().time())
