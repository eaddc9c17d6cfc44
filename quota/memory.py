"""The in-process quota backend (one router process, no Redis)."""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ferryman_server.kernel.quota import Decision, ReserveCall, Verdict
from ferryman_server.quota.policy import (
    CHARGE_MEMORY_S,
    DAY_S,
    WINDOW_S,
    Counters,
    Limits,
    add_spend,
    charge,
    check,
    check_rate,
    combine,
    count_rate,
    grant,
    over_cost,
    prune_log,
    refill,
    settle,
)


@dataclass
class Reservation:
    scopes: tuple[str, ...]
    tokens: int
    cost: float
    verdict: Verdict
    expiry: float
    """When the lease ends unless renewed."""
    fingerprint: str
    settled: bool = False
    expired: bool = False
    """Its lease ran out unsettled (its caller died): a repeat takes it over."""
    answer: bytes = b""
    """The answer its commit carried, kept for repeats (within the tenant's budget)."""


class MemoryQuota:
    """Quota counters in this process; every call is idempotent on request id."""

    def __init__(
        self,
        reservation_ttl_s: float,
        kept_per_tenant_bytes: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._ttl = reservation_ttl_s
        """How long a request id is remembered after its lease or settlement (idempotency)."""
        self._kept_budget = kept_per_tenant_bytes
        self._kept: dict[str, int] = {}
        """Bytes of answers kept per tenant (a quota id's part before its first ``/``)."""
        self._clock = clock
        self._states: dict[str, Counters] = {}
        self._reservations: dict[str, Reservation] = {}
        self._due: list[tuple[float, str]] = []
        """(when to look at a reservation again, request id), a min-heap: expiry for an open
        reservation, expiry + TTL to forget a settled one. Scanning every reservation on
        every call would cost O(requests in the last TTL) per request."""
        self.expired = 0
        self._replays = 0
        """Repeats counted against rate limits so far (each a key of its own in the rpm log)."""
        self._charged: dict[str, tuple[float, float]] = {}
        """charge id -> (total charged, when it is forgotten)."""
        self._charged_pruned = clock()

    def _state(self, scope: str) -> Counters:
        return self._states.setdefault(scope, Counters())

    def _expire(self, now: float) -> None:
        while self._due and self._due[0][0] <= now:
            _, request_id = heapq.heappop(self._due)
            reservation = self._reservations.get(request_id)
            if reservation is None:
                continue
            if reservation.settled and reservation.expiry + self._ttl <= now:
                self._forget(request_id)  # kept a while for idempotent retries
                continue
            if not reservation.settled and reservation.expiry <= now:
                reservation.settled = reservation.expired = True
                self.expired += 1
                for scope in reservation.scopes:
                    self._state(scope).inflight.pop(request_id, None)
            heapq.heappush(self._due, (reservation.expiry + self._ttl, request_id))

    async def reserve(
        self, call: ReserveCall, policies: Sequence[Limits], lease_s: float, budget_s: float
    ) -> Verdict:
        request_id, ask, fingerprint = call.request_id, call.ask, call.fingerprint
        now = self._clock()
        self._expire(now)
        known = self._reservations.get(request_id)
        if known is not None:
            if known.fingerprint != fingerprint:
                return Verdict(Decision.CONFLICT, held=False)
            if known.expired:
                return self._take_over(request_id, known, now + lease_s)
            if known.settled:
                # A repeat answered from here is a request as far as the rate limits go:
                # replays are not free (one waiting for a running first call is not one).
                rate = combine([(p, check_rate(p, self._state(p.scope), now)) for p in policies])
                if rate.decision == Decision.REJECT:
                    return replace(rate, held=False)
                self._replays += 1
                for p in policies:
                    count_rate(p, self._state(p.scope), now, f"{request_id}#{self._replays}")
            # A retry is answered as the first call was; only that first call settles.
            return replace(
                known.verdict, held=False, repeat=True, running=not known.settled, answer=known.answer
            )
        asked = ask.tokens
        granted = grant([(p, self._state(p.scope)) for p in policies], now, ask)
        tokens, cost = granted.tokens, granted.cost
        result = combine([(p, check(p, self._state(p.scope), now, tokens, cost)) for p in policies])
        if result.decision == Decision.REJECT:
            # A refusal charges nothing and is not remembered: a retry is judged anew.
            return replace(result, held=False)
        if tokens < asked:
            result = replace(result, tokens=tokens)
        expiry = now + lease_s
        for p in policies:
            charge(p, self._state(p.scope), now, request_id, tokens, cost, expiry)
        self._reservations[request_id] = Reservation(
            scopes=tuple(p.scope for p in policies),
            tokens=tokens,
            cost=cost,
            verdict=result,
            expiry=expiry,
            fingerprint=fingerprint,
        )
        heapq.heappush(self._due, (expiry, request_id))
        return result

    def _take_over(self, request_id: str, known: Reservation, expiry: float) -> Verdict:
        """A repeat of a request whose caller died (its lease ran out unsettled) runs it:
        the reservation is held again under the repeat's lease, and its first charge is the
        request's only one (the repeat's Commit settles it)."""
        known.settled = known.expired = False
        known.expiry = expiry
        for scope in known.scopes:
            self._state(scope).inflight[request_id] = expiry
        heapq.heappush(self._due, (expiry, request_id))
        return known.verdict

    async def renew(self, request_ids: Sequence[str], lease_s: float) -> int:
        now = self._clock()
        self._expire(now)
        renewed = 0
        for request_id in request_ids:
            reservation = self._reservations.get(request_id)
            if reservation is None or reservation.settled:
                continue
            reservation.expiry = now + lease_s
            for scope in reservation.scopes:
                self._state(scope).inflight[request_id] = reservation.expiry
            heapq.heappush(self._due, (reservation.expiry, request_id))
            renewed += 1
        return renewed

    async def commit(self, request_id: str, tokens: int, cost: float, answer: bytes = b"") -> bool:
        settled = self._settle(request_id, tokens, cost, refund=False)
        if settled and answer:
            tenant = request_id.split("/", 1)[0]
            kept = self._kept.get(tenant, 0)
            if kept + len(answer) <= self._kept_budget:
                self._reservations[request_id].answer = answer
                self._kept[tenant] = kept + len(answer)
        return settled

    def _forget(self, request_id: str) -> None:
        reservation = self._reservations.pop(request_id)
        if reservation.answer:
            tenant = request_id.split("/", 1)[0]
            self._kept[tenant] -= len(reservation.answer)
            if not self._kept[tenant]:
                del self._kept[tenant]

    async def release(self, request_id: str) -> bool:
        return self._settle(request_id, 0, 0.0, refund=True)

    def _settle(self, request_id: str, tokens: int, cost: float, *, refund: bool) -> bool:
        now = self._clock()
        self._expire(now)
        reservation = self._reservations.get(request_id)
        if reservation is None or reservation.settled:
            return False  # a lease that ran out ended it, charged in full
        reservation.settled = True
        token_delta = -reservation.tokens if refund else tokens - reservation.tokens
        cost_delta = -reservation.cost if refund else cost - reservation.cost
        for scope in reservation.scopes:
            settle(self._state(scope), now, request_id, token_delta, cost_delta, refund)
        if refund:
            # Nothing was served under this id: a retry is a first request, charged once.
            self._forget(request_id)
        return True

    async def charge(
        self, charge_id: str, policies: Sequence[Limits], total_cost: float
    ) -> tuple[float, bool]:
        """Add what the account cost beyond what it was charged before to every policy's
        spend; (dollars added, any hard daily cost limit reached)."""
        now = self._clock()
        if now >= self._charged_pruned + DAY_S:
            self._charged = {k: v for k, v in self._charged.items() if v[1] > now}
            self._charged_pruned = now
        before = self._charged.get(charge_id, (0.0, 0.0))[0]
        delta = max(0.0, total_cost - before)
        if delta:
            self._charged[charge_id] = (total_cost, now + CHARGE_MEMORY_S)
            for p in policies:
                add_spend(self._state(p.scope), now, delta)
        return delta, any(over_cost(p, self._state(p.scope), now) for p in policies)

    async def warm(self) -> None:
        """Nothing to ready in memory."""

    async def expired_count(self) -> int:
        self._expire(self._clock())
        return self.expired

    async def usage(self, policies: Sequence[Limits]) -> list[tuple[str, float, float, str]]:
        """(limit, current, maximum, mode) for every limit of the policies."""
        now = self._clock()
        self._expire(now)
        rows: list[tuple[str, float, float, str]] = []
        for p in policies:
            state = self._state(p.scope)
            mode = "soft" if p.soft else "hard"
            if p.rpm is not None:
                prune_log(state, now)
                rows.append((f"{p.scope}:rpm", len(state.admitted), p.rpm, mode))
            if p.tpm is not None:
                level = refill(state.tpm_tokens, state.tpm_at, p.tpm, p.tpm / WINDOW_S, now)
                rows.append((f"{p.scope}:tpm", p.tpm - level, p.tpm, mode))
            if p.cost_per_day_usd is not None:
                spent = state.cost_spent if state.cost_day == int(now // DAY_S) else 0.0
                rows.append((f"{p.scope}:cost_per_day", spent, p.cost_per_day_usd, mode))
            if p.max_concurrency is not None:
                live = sum(1 for e in state.inflight.values() if e > now)
                rows.append((f"{p.scope}:max_concurrency", live, p.max_concurrency, mode))
        return rows
