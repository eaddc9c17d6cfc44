"""The quota contract as its callers see it: what a Reserve asks (``Ask``), what it is told
(``Decision``, ``Verdict``, ``Violation``), the bounds on any call, how a call fails
(``QuotaUnavailable``), the port a router calls (``QuotaClient``) and its gRPC side
(``RemoteQuota``). The Quota service (``ferryman_server.quota``) implements it; the router only
calls it, in-process or over the network."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

import grpc

from ferryman.durations import seconds_of
from ferryman.errors import status_code
from ferryman.v1 import quota_pb2, quota_pb2_grpc
from ferryman_server.kernel.logs import Throttled

log = logging.getLogger("ferryman.quota.client")
PROBLEM_LOG_PERIOD_S = 10.0
"""At most one warning per kind of failed call (renew, commit, release) in this long."""

MAX_REQUEST_ID_CHARS = 256
MAX_NAME_CHARS = 128
MAX_TOKENS = 10**9
MAX_COST_USD = 1e6
MAX_RENEW_IDS = 10_000
MAX_ANSWER_BYTES = 1024 * 1024
MAX_RESERVE_MANY = 1000
"""Bounds on what any caller may ask of the Quota service, whoever it is."""
RESERVE_WINDOW_S = 0.001
"""How long a router's Reserve waits for others to go with it to a remote Quota service."""


RENEWALS_PER_LEASE = 3
"""A caller renews a running reservation at least this many times per lease, so one late or
lost renewal never frees a running request's slot."""


class QuotaUnavailable(Exception):
    """The backend could not be reached and the fail mode is closed."""


class Decision(StrEnum):
    ADMIT = "admit"
    DEGRADE = "degrade"
    REJECT = "reject"
    CONFLICT = "conflict"
    """The request id was already used for a different request."""


@dataclass(frozen=True)
class Violation:
    limit: str
    current: float
    maximum: float


@dataclass(frozen=True)
class Verdict:
    decision: Decision
    violations: tuple[Violation, ...] = ()
    retry_after_s: float = 0.0
    held: bool = True
    """A reservation was taken and must be committed or released (not when no limit applies)."""
    tokens: int = 0
    """Tokens reserved when fewer than asked were granted (``Ask.min_tokens``); 0: as asked."""
    repeat: bool = False
    """This answers a repeat of an earlier Reserve of the same request id."""
    running: bool = False
    """A repeat whose first call still runs: its answer is not known yet."""
    answer: bytes = b""
    """A repeat's kept answer (the first call's, as its Commit carried it); empty when none
    was kept: too large, or the first caller stopped before it answered."""


@dataclass(frozen=True)
class Ask:
    """What a Reserve asks for: ``tokens`` and their ``cost``; with ``min_tokens`` (0 <
    min_tokens < tokens), any amount down to it will do (a generation that can be cut
    short), the cost falling by ``cost_per_token`` per token not granted."""

    tokens: int
    cost: float
    min_tokens: int = 0
    cost_per_token: float = 0.0

    @property
    def partial(self) -> bool:
        return 0 < self.min_tokens < self.tokens

    def cut(self, tokens: int) -> Ask:
        """The same ask for ``tokens`` only."""
        return Ask(tokens, max(0.0, self.cost - (self.tokens - tokens) * self.cost_per_token))


@dataclass(frozen=True)
class ReserveCall:
    """One Reserve: the request's quota id, its tenant and model, what it asks for, and the
    fingerprint that binds the id to this request (a repeat with another is a CONFLICT).
    ``replayable``: the caller chose the id, so it may come again: it is bound, and the
    answer its Commit carries kept, even for a tenant without limits."""

    request_id: str
    tenant: str
    model: str
    ask: Ask
    fingerprint: str
    replayable: bool = False


FROM_PROTO = {
    quota_pb2.QUOTA_DECISION_ADMIT: Decision.ADMIT,
    quota_pb2.QUOTA_DECISION_ADMIT_DEGRADED: Decision.DEGRADE,
    quota_pb2.QUOTA_DECISION_REJECT: Decision.REJECT,
    quota_pb2.QUOTA_DECISION_CONFLICT: Decision.CONFLICT,
}


class QuotaClient(Protocol):
    """The Quota service as a router calls it, in-process or over gRPC."""

    async def reserve(self, call: ReserveCall, budget_s: float) -> Verdict: ...
    async def renew(self, request_ids: list[str], budget_s: float) -> int: ...
    async def commit(
        self, request_id: str, tokens: int, cost: float, budget_s: float, answer: bytes = b""
    ) -> bool:
        """Settle with what the request used; ``answer`` (at most MAX_ANSWER_BYTES) is kept
        for repeats of a replayable request."""
        ...

    async def release(self, request_id: str, budget_s: float) -> bool: ...
    async def charge(
        self, charge_id: str, tenant: str, model: str, total_cost: float, budget_s: float
    ) -> tuple[float, bool]:
        """(dollars added to the spend, a hard daily cost limit reached); raises
        QuotaUnavailable when the charge could not be made (try again: it is idempotent)."""
        ...

    def unlimited(self, tenant: str, model: str) -> bool:
        """True only when it is known here that no limit applies: Reserve of a request that
        is not replayable would admit without holding anything, so the router need not call
        it (nor fingerprint)."""
        ...


def reserve_request(call: ReserveCall) -> quota_pb2.ReserveRequest:
    return quota_pb2.ReserveRequest(
        request_id=call.request_id,
        tenant=call.tenant,
        model=call.model,
        estimated_tokens=call.ask.tokens,
        estimated_cost_usd=call.ask.cost,
        fingerprint=call.fingerprint,
        min_tokens=call.ask.min_tokens,
        cost_per_token_usd=call.ask.cost_per_token,
        replayable=call.replayable,
    )


def verdict_of(response: quota_pb2.ReserveResponse) -> Verdict:
    return Verdict(
        FROM_PROTO[response.decision],
        tuple(Violation(v.limit, v.current, v.maximum) for v in response.violations),
        seconds_of(response.retry_after),
        held=response.held,
        tokens=response.granted_tokens,
        repeat=response.repeat,
        running=response.running,
        answer=response.answer,
    )


Pending = tuple[quota_pb2.ReserveRequest, float, "asyncio.Future[Verdict]"]
"""A Reserve waiting for its turn's batch: the request, its give-up time (loop), its answer."""


class RemoteQuota:
    """A Quota server over gRPC; UNAVAILABLE from it (or no answer) is QuotaUnavailable.

    Reserves that arrive within RESERVE_WINDOW_S of the first waiting one (a stream's
    burst, many clients at once) go in one ReserveMany call, up to MAX_RESERVE_MANY: one
    round trip, and one gRPC call and one Redis pipeline on the Quota service, instead of
    one each (2,000 at once, one call each, missed the 0.5 s quota budget)."""

    def __init__(self, channel: grpc.aio.Channel, metadata: tuple[tuple[str, str], ...]) -> None:
        self._stub = quota_pb2_grpc.QuotaStub(channel)
        self._metadata = metadata
        self._pending: list[Pending] = []
        self._flush: asyncio.TimerHandle | None = None
        self._sending: set[asyncio.Task[None]] = set()
        # A settle that fails is answered as not applied (its lease settles it later), never
        # raised: said in the log, once a period per kind, so an outage does not flood it.
        self._problems = Throttled(log, PROBLEM_LOG_PERIOD_S)

    def _failed(self, call: str, exc: grpc.aio.AioRpcError) -> None:
        self._problems.warning(
            call, "quota %s failed (its lease settles it later): %s %s", call, exc.code().name, exc.details()
        )

    def unlimited(self, tenant: str, model: str) -> bool:
        return False  # the Quota server decides on its own snapshot: always ask it

    async def reserve(self, call: ReserveCall, budget_s: float) -> Verdict:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Verdict] = loop.create_future()
        self._pending.append((reserve_request(call), loop.time() + budget_s, answer))
        if len(self._pending) == 1:
            self._flush = loop.call_later(RESERVE_WINDOW_S, self._send_pending)
        elif len(self._pending) == MAX_RESERVE_MANY:
            self._send_pending()
        # Each caller waits its own budget: the batch's call runs for the longest of them,
        # so one caller with little time left does not fail the others.
        try:
            async with asyncio.timeout(budget_s):
                return await answer
        except TimeoutError:
            raise QuotaUnavailable(
                "quota service: DEADLINE_EXCEEDED no answer within the quota budget"
            ) from None

    def _send_pending(self) -> None:
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        batch, self._pending = self._pending, []
        task = asyncio.create_task(self._send(batch))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, batch: list[Pending]) -> None:
        live = [(request, until, answer) for request, until, answer in batch if not answer.done()]
        if not live:
            return  # every caller left (cancelled) before its turn came
        budget = max(0.0, max(until for _, until, _ in live) - asyncio.get_running_loop().time())
        many = quota_pb2.ReserveManyRequest(calls=[request for request, _, _ in live])
        try:
            response: quota_pb2.ReserveManyResponse = await self._stub.ReserveMany(
                many, timeout=budget, metadata=self._metadata
            )
        except grpc.aio.AioRpcError as exc:
            failed = QuotaUnavailable(f"quota service: {exc.code().name} {exc.details()}")
            for _, _, answer in live:
                if not answer.done():
                    answer.set_exception(failed)
            return
        for (_, _, answer), result in zip(live, response.results, strict=True):
            if answer.done():
                continue
            if result.WhichOneof("result") == "verdict":
                answer.set_result(verdict_of(result.verdict))
            else:
                code = status_code(result.error).name
                answer.set_exception(QuotaUnavailable(f"quota service: {code} {result.error.message}"))

    async def renew(self, request_ids: list[str], budget_s: float) -> int:
        try:
            response: quota_pb2.RenewResponse = await self._stub.Renew(
                quota_pb2.RenewRequest(request_ids=request_ids), timeout=budget_s, metadata=self._metadata
            )
        except grpc.aio.AioRpcError as exc:
            self._failed("renew", exc)
            return 0
        return int(response.renewed)

    async def commit(
        self, request_id: str, tokens: int, cost: float, budget_s: float, answer: bytes = b""
    ) -> bool:
        request = quota_pb2.CommitRequest(
            request_id=request_id, actual_tokens=tokens, actual_cost_usd=cost, answer=answer
        )
        try:
            response: quota_pb2.SettleResponse = await self._stub.Commit(
                request, timeout=budget_s, metadata=self._metadata
            )
        except grpc.aio.AioRpcError as exc:
            self._failed("commit", exc)
            return False
        return response.applied

    async def release(self, request_id: str, budget_s: float) -> bool:
        try:
            response: quota_pb2.SettleResponse = await self._stub.Release(
                quota_pb2.ReleaseRequest(request_id=request_id), timeout=budget_s, metadata=self._metadata
            )
        except grpc.aio.AioRpcError as exc:
            self._failed("release", exc)
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
