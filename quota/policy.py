"""Quota arithmetic: pure functions over limits, counters and a clock.

Per policy (a tenant, optionally one model):

- ``rpm``: at most N requests admitted in any 60 s (a sliding log, exact);
- ``burst``: at most B at once, refilled at rpm/60 per second (a token bucket);
- ``tpm``: tokens per minute (a token bucket of tpm, refilled at tpm/60 per second;
  commits settle estimate vs actual, so it can run into debt);
- ``cost_per_day_usd``: spend per UTC day (a fixed window);
- ``max_concurrency``: reservations not yet settled.

A request is checked against every limit at once; if any hard limit would be broken
nothing is charged (all or nothing). A soft policy admits but says "degrade".
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from ferryman_server.kernel.quota import Ask, Decision, Verdict, Violation

WINDOW_S = 60.0
DAY_S = 86400.0
CONCURRENCY_RETRY_S = 0.1
"""When a request refused for max_concurrency may try again (a slot frees at any time)."""


CHARGE_MEMORY_S = 8 * DAY_S
"""How long an account's charged total is remembered after its last charge: past any
job's completion window (at most a week), or a late charge would count it all again."""


@dataclass(frozen=True)
class Limits:
    """One policy's limits; None means unlimited."""

    scope: str
    """``tenant`` or ``tenant/model``: the counters' key."""
    rpm: int | None = None
    burst: int | None = None
    tpm: int | None = None
    cost_per_day_usd: float | None = None
    max_concurrency: int | None = None
    soft: bool = False


@dataclass
class Counters:
    """The state of one scope's limits (the memory backend's; Redis keeps the same)."""

    admitted: dict[str, float] = field(default_factory=dict)
    """request id -> admission time, within the last window (the rpm log)."""
    admission_order: deque[tuple[float, str]] = field(default_factory=deque)
    """(admission time, request id) oldest first, so pruning the log touches only what leaves it."""
    burst_tokens: float | None = None
    burst_at: float = 0.0
    tpm_tokens: float | None = None
    tpm_at: float = 0.0
    cost_day: int = -1
    cost_spent: float = 0.0
    inflight: dict[str, float] = field(default_factory=dict)
    """request id -> reservation expiry."""


def refill(tokens: float | None, at: float, capacity: float, per_s: float, now: float) -> float:
    """A token bucket's level at ``now`` (full when never used)."""
    if tokens is None:
        return capacity
    return min(capacity, tokens + max(0.0, now - at) * per_s)


def prune_log(state: Counters, now: float) -> None:
    """Drop admissions that left the window (and refunded ones) from the head of the rpm log.

    Amortised O(1): each admission is appended once and popped once."""
    order, admitted = state.admission_order, state.admitted
    while order:
        at, request_id = order[0]
        if at > now - WINDOW_S and admitted.get(request_id) == at:
            return
        order.popleft()
        if at <= now - WINDOW_S and admitted.get(request_id) == at:
            del admitted[request_id]


def grant(policies: list[tuple[Limits, Counters]], now: float, ask: Ask) -> Ask:
    """What to reserve: ``ask`` as it is, or, for a partial ask, the most tokens (down to
    ``min_tokens``) that every hard tpm and cost limit leaves. When not even ``min_tokens``
    fit, the ask for ``min_tokens``, which ``check`` then refuses with that amount's wait."""
    if not ask.partial:
        return ask
    fixed = ask.cost - ask.tokens * ask.cost_per_token
    most = ask.tokens
    for limits, state in policies:
        if limits.soft:
            continue  # soft limits degrade, they never shorten
        if limits.tpm is not None:
            level = refill(state.tpm_tokens, state.tpm_at, limits.tpm, limits.tpm / WINDOW_S, now)
            most = min(most, math.floor(level))
        if limits.cost_per_day_usd is not None and ask.cost_per_token > 0:
            day = int(now // DAY_S)
            spent = state.cost_spent if state.cost_day == day else 0.0
            fits = math.floor((limits.cost_per_day_usd - spent - fixed) / ask.cost_per_token)
            while fits > 0 and spent + fixed + fits * ask.cost_per_token > limits.cost_per_day_usd:
                fits -= 1  # floating point: the grant must never break the limit
            most = min(most, fits)
    return ask.cut(max(most, ask.min_tokens))


def check_rate(limits: Limits, state: Counters, now: float) -> list[tuple[Violation, float]]:
    """The request-rate limits (rpm, burst) one more request would break, each with when it
    may succeed (seconds from now)."""
    broken: list[tuple[Violation, float]] = []
    if limits.rpm is not None:
        prune_log(state, now)
        recent = len(state.admitted)
        if recent + 1 > limits.rpm:
            oldest = state.admission_order[0][0] if state.admission_order else now
            broken.append((Violation("rpm", recent, limits.rpm), oldest + WINDOW_S - now))
    if limits.burst is not None:
        rate = (limits.rpm or limits.burst) / WINDOW_S
        level = refill(state.burst_tokens, state.burst_at, limits.burst, rate, now)
        if level < 1:
            broken.append((Violation("burst", limits.burst - level, limits.burst), (1 - level) / rate))
    return broken


def check(
    limits: Limits, state: Counters, now: float, tokens: int, cost: float
) -> list[tuple[Violation, float]]:
    """Limits this request would break, each with when it may succeed (seconds from now)."""
    broken = check_rate(limits, state, now)
    if limits.tpm is not None:
        rate = limits.tpm / WINDOW_S
        level = refill(state.tpm_tokens, state.tpm_at, limits.tpm, rate, now)
        if level < tokens:
            wait = (tokens - level) / rate if tokens <= limits.tpm else WINDOW_S
            broken.append((Violation("tpm", limits.tpm - level, limits.tpm), wait))
    if limits.cost_per_day_usd is not None:
        day = int(now // DAY_S)
        spent = state.cost_spent if state.cost_day == day else 0.0
        if spent + cost > limits.cost_per_day_usd:
            broken.append(
                (Violation("cost_per_day", spent, limits.cost_per_day_usd), (day + 1) * DAY_S - now)
            )
    if limits.max_concurrency is not None:
        live = sum(1 for expiry in state.inflight.values() if expiry > now)
        if live + 1 > limits.max_concurrency:
            broken.append((Violation("max_concurrency", live, limits.max_concurrency), CONCURRENCY_RETRY_S))
    return broken


def charge(
    limits: Limits, state: Counters, now: float, request_id: str, tokens: int, cost: float, expiry: float
) -> None:
    """Take the request's share of every limit (after ``check`` allowed it)."""
    count_rate(limits, state, now, request_id)
    if limits.tpm is not None:
        state.tpm_tokens = (
            refill(state.tpm_tokens, state.tpm_at, limits.tpm, limits.tpm / WINDOW_S, now) - tokens
        )
        state.tpm_at = now
    add_spend(state, now, cost)
    state.inflight[request_id] = expiry


def count_rate(limits: Limits, state: Counters, now: float, key: str) -> None:
    """Count one request (``key`` in the rpm log) against the request-rate limits."""
    prune_log(state, now)
    state.admitted[key] = now
    state.admission_order.append((now, key))
    if limits.burst is not None:
        rate = (limits.rpm or limits.burst) / WINDOW_S
        state.burst_tokens = refill(state.burst_tokens, state.burst_at, limits.burst, rate, now) - 1
        state.burst_at = now


def settle(
    state: Counters, now: float, request_id: str, token_delta: int, cost_delta: float, refund_request: bool
) -> None:
    """Apply actual-minus-estimate and end the reservation (Commit), or refund it (Release)."""
    state.inflight.pop(request_id, None)
    if state.tpm_tokens is not None:
        state.tpm_tokens -= token_delta
    if state.cost_day == int(now // DAY_S):
        state.cost_spent += cost_delta
    if refund_request and state.admitted.pop(request_id, None) is not None and state.burst_tokens is not None:
        state.burst_tokens += 1


def add_spend(state: Counters, now: float, cost: float) -> None:
    """Add ``cost`` to the day's spend (a new day starts from zero)."""
    day = int(now // DAY_S)
    if state.cost_day != day:
        state.cost_day, state.cost_spent = day, 0.0
    state.cost_spent += cost


def over_cost(limits: Limits, state: Counters, now: float) -> bool:
    """A hard daily cost limit reached: nothing more may be spent today."""
    if limits.soft or limits.cost_per_day_usd is None:
        return False
    spent = state.cost_spent if state.cost_day == int(now // DAY_S) else 0.0
    return spent >= limits.cost_per_day_usd


def combine(results: list[tuple[Limits, list[tuple[Violation, float]]]]) -> Verdict:
    """One verdict over every policy: any hard break rejects, any soft break degrades."""
    violations = tuple(v for _, broken in results for v, _ in broken)
    if not violations:
        return Verdict(Decision.ADMIT)
    hard = [w for limits, broken in results if not limits.soft for _, w in broken]
    if hard:
        return Verdict(Decision.REJECT, violations, max(hard))
    return Verdict(Decision.DEGRADE, violations, 0.0)
