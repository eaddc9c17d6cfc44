"""A router's reservations: reserve a request's quota, settle it when the request ends
(commit what it used, or release it), and renew the leases of those still running.

Predict, Generate and jobs all reserve through here, so the rules of a request id (one id,
one reservation; a refusal's status and details) live in one place.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import Any

import grpc

from ferryman.errors import Reason
from ferryman_server.kernel.quota import (
    MAX_ANSWER_BYTES,
    MAX_RENEW_IDS,
    Ask,
    Decision,
    QuotaClient,
    QuotaUnavailable,
    ReserveCall,
    Verdict,
)
from ferryman_server.kernel.telemetry import current_span, tracer
from ferryman_server.router.bounds import clip
from ferryman_server.router.failures import fail
from ferryman_server.router.metrics import RouterMetrics
from ferryman_server.router.settings import RouterSettings

SETTLE_TIMEOUT_S = 1.0
"""How long one Commit or Release may take; it runs off the answer's path."""
log = logging.getLogger("ferryman.router")


def request_id_of(quota_id: str) -> str:
    """The client's request id in a quota id (``tenant/request id``)."""
    return quota_id.split("/", 1)[-1]


class Reservations:
    """The reservations this router holds, each keyed by its quota id (``tenant/request id``)."""

    def __init__(self, settings: RouterSettings, quota: QuotaClient, metrics: RouterMetrics) -> None:
        self._settings = settings
        self._quota = quota
        self._metrics = metrics
        self._tracer = tracer("ferryman.router")
        self._held: set[str] = set()
        """Quota ids of reservations held for running requests: renewed every
        ``lease_renew_s``, so they end within a lease if this process dies."""
        self._background: set[asyncio.Task[object]] = set()

    @property
    def held(self) -> int:
        """Reservations held now (for running requests)."""
        return len(self._held)

    async def reserve(
        self,
        quota_id: str,
        tenant: str,
        model: str,
        ask: Ask,
        digest: Callable[[], str],
        deadline: float,
        *,
        replayable: bool,
    ) -> Verdict:
        """Reserve ``ask`` for a request (within its deadline); a held reservation is renewed
        until ``commit_later`` or ``release_later``. Refusals raise RequestFailed.
        ``digest`` fingerprints the request, only when a quota service needs it.

        ``replayable``: the caller chose the id, so it is bound to this request for every
        tenant. A repeat waits while the first call runs, then comes back with its kept
        answer (``Verdict.repeat``, ``Verdict.answer``); one whose answer was not kept is
        refused ANSWER_NOT_KEPT."""
        if not replayable and self._quota.unlimited(tenant, model):
            verdict = Verdict(Decision.ADMIT, held=False)  # no call, no fingerprint
        else:
            verdict = await self._settled_verdict(
                ReserveCall(quota_id, tenant, model, ask, digest(), replayable), deadline
            )
        self._metrics.child(
            self._metrics.quota_decisions, self._metrics.tenant(tenant), verdict.decision.value
        ).inc()
        if verdict.decision == Decision.CONFLICT:
            raise fail(
                grpc.StatusCode.ALREADY_EXISTS,
                f"request_id {clip(request_id_of(quota_id))!r} was already used for a different request",
                Reason.REQUEST_ID_REUSED,
            )
        if verdict.decision == Decision.REJECT:
            raise fail(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                "quota exceeded: "
                + ", ".join(f"{v.limit} {v.current:g}/{v.maximum:g}" for v in verdict.violations),
                Reason.QUOTA_EXCEEDED,
                quota_violations=[
                    (f"{tenant}:{v.limit}", f"{v.current:g} of {v.maximum:g} used")
                    for v in verdict.violations
                ],
                retry_after=timedelta(seconds=max(verdict.retry_after_s, 0.001)),
            )
        if verdict.repeat and not verdict.answer:
            raise fail(
                grpc.StatusCode.ALREADY_EXISTS,
                f"request_id {clip(request_id_of(quota_id))!r} was already answered and its answer "
                "was not kept (the id was generated, or the answer too large or past the tenant's "
                "kept-answer bound): use a new id to run it again",
                Reason.ANSWER_NOT_KEPT,
            )
        if verdict.held:
            self._held.add(quota_id)
        return verdict

    async def _settled_verdict(self, call: ReserveCall, deadline: float) -> Verdict:
        """The quota store's verdict; a repeat whose first call still runs asks again
        (backing off) until that call has answered or the deadline comes."""
        loop = asyncio.get_running_loop()
        pause = self._settings.repeat_poll_s
        while True:
            verdict = await self._call(call, deadline)
            if not (verdict.repeat and verdict.running):
                return verdict
            # The first call under this id still runs: its answer is this one's.
            if loop.time() + pause >= deadline:
                raise fail(
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    f"the first request under request_id {clip(request_id_of(call.request_id))!r} "
                    "is still running",
                    Reason.DEADLINE,
                )
            await asyncio.sleep(pause)
            pause = min(pause * 2, self._settings.repeat_poll_max_s)

    async def _call(self, call: ReserveCall, deadline: float) -> Verdict:
        budget = min(self._settings.quota_timeout_s, deadline - asyncio.get_running_loop().time())
        try:
            with current_span(self._tracer, "quota.reserve", attributes={"ferryman.tenant": call.tenant}):
                return await self._quota.reserve(call, budget_s=budget)
        except QuotaUnavailable as exc:
            raise fail(grpc.StatusCode.UNAVAILABLE, str(exc), Reason.QUOTA_UNAVAILABLE) from None

    def commit_later(self, quota_id: str, tokens: int, cost: float, answer: bytes = b"") -> None:
        """Settle a held reservation with what the request used, off the answer's path;
        ``answer`` (a replayable request's, serialized) is kept for its repeats when it is
        within MAX_ANSWER_BYTES."""
        self._held.discard(quota_id)
        kept = answer if len(answer) <= MAX_ANSWER_BYTES else b""
        self._settle_later(self._quota.commit(quota_id, tokens, cost, budget_s=SETTLE_TIMEOUT_S, answer=kept))

    def release_later(self, quota_id: str) -> None:
        """Give a held reservation back (the request did not run), off the answer's path."""
        self._held.discard(quota_id)
        self._settle_later(self._quota.release(quota_id, budget_s=SETTLE_TIMEOUT_S))

    def _settle_later(self, settle: Coroutine[Any, Any, bool]) -> None:
        """Settle in a task a cancelled request cannot cancel."""
        task: asyncio.Task[object] = asyncio.create_task(settle)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def renew_leases(self, stop: asyncio.Event) -> None:
        """Renew the leases of every reservation held for a running request, until ``stop``."""
        period = self._settings.lease_renew_s
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), period)
            held = list(self._held)
            # In chunks the Quota service accepts; a failure leaves the leases running out
            # (never stops renewal: that would free every running request's slot).
            for start in range(0, len(held), MAX_RENEW_IDS):
                try:
                    await self._quota.renew(held[start : start + MAX_RENEW_IDS], budget_s=period)
                except Exception:
                    log.exception("renewing quota leases failed")

    async def close(self) -> None:
        """Wait for settlements still under way (bounded by their own timeouts)."""
        if self._background:
            await asyncio.wait(self._background, timeout=SETTLE_TIMEOUT_S * 2)
