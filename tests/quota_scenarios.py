"""Quota scenarios every backend must pass with identical decisions (the parity suite).

tests/unit/quota/test_quota_arithmetic.py runs them on the memory backend and
tests/integration/router/test_quota_parity.py on real Redis, each with a fake clock."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import pytest

from ferryman_server.kernel.quota import Ask, Decision, ReserveCall, Verdict
from ferryman_server.quota.policy import Limits
from ferryman_server.quota.service import QuotaBackend

LONG_LEASE_S = 300.0
BUDGET_S = 5.0
TTL_S = 300.0
"""How long a settled id is remembered: every backend under test is made with it."""
KEPT = 1024 * 1024
"""Bytes of one tenant's answers kept at once: every backend under test is made with it."""


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Harness:
    backend: QuotaBackend
    clock: Clock

    async def reserve(
        self,
        request_id: str,
        limits: Sequence[Limits],
        tokens: int = 0,
        cost: float = 0.0,
        *,
        fingerprint: str = "",
        lease_s: float = LONG_LEASE_S,
        min_tokens: int = 0,
        cost_per_token: float = 0.0,
        replayable: bool = False,
    ) -> Verdict:
        ask = Ask(tokens, cost, min_tokens, cost_per_token)
        call = ReserveCall(request_id, "", "", ask, fingerprint or f"fp:{request_id}", replayable)
        return await self.backend.reserve(call, limits, lease_s, BUDGET_S)

    async def decisions(self, ids: Sequence[str], limits: Sequence[Limits]) -> list[Decision]:
        return [(await self.reserve(i, limits)).decision for i in ids]

    async def usage(self, limits: Sequence[Limits]) -> dict[str, float]:
        return {name: current for name, current, _, _ in await self.backend.usage(limits)}


async def rpm_admits_n_in_any_minute(q: Harness) -> None:
    limits = [Limits(scope="t", rpm=3)]
    assert await q.decisions([f"r{i}" for i in range(4)], limits) == [Decision.ADMIT] * 3 + [Decision.REJECT]
    rejected = await q.reserve("r9", limits)
    assert rejected.violations[0].limit == "rpm" and 59 < rejected.retry_after_s <= 60
    q.clock.now += 60.5
    assert (await q.reserve("r10", limits)).decision == Decision.ADMIT


async def rpm_log_slides_and_a_refund_frees_its_place(q: Harness) -> None:
    limits = [Limits(scope="t", rpm=3)]
    for i in range(3):  # admitted at +0, +10, +20
        assert (await q.reserve(f"s{i}", limits)).decision == Decision.ADMIT
        q.clock.now += 10
    rejected = await q.reserve("late", limits)  # at +30: the oldest leaves at +60
    assert rejected.decision == Decision.REJECT and rejected.retry_after_s == pytest.approx(30, abs=0.01)
    assert await q.backend.release("s1")  # refunded: its place is free at once
    assert (await q.reserve("refilled", limits)).decision == Decision.ADMIT
    q.clock.now += 30.5  # +60.5: s0 has left the window, s2 and refilled remain
    assert (await q.usage(limits))["t:rpm"] == 2
    assert (await q.reserve("next", limits)).decision == Decision.ADMIT
    assert (await q.reserve("over", limits)).decision == Decision.REJECT


async def burst_limits_requests_at_once(q: Harness) -> None:
    limits = [Limits(scope="t", rpm=60, burst=2)]
    assert await q.decisions(["b0", "b1", "b2"], limits) == [Decision.ADMIT, Decision.ADMIT, Decision.REJECT]
    q.clock.now += 1.0  # 60 rpm refills one per second
    assert (await q.reserve("b3", limits)).decision == Decision.ADMIT


async def tokens_settle_on_commit_and_refund_on_release(q: Harness) -> None:
    limits = [Limits(scope="t", tpm=100)]
    assert (await q.reserve("a", limits, 80)).decision == Decision.ADMIT
    assert (await q.reserve("b", limits, 30)).decision == Decision.REJECT  # 80 + 30 > 100
    assert await q.backend.commit("a", 20, 0)  # actual 20: 60 tokens come back
    assert (await q.usage(limits))["t:tpm"] == pytest.approx(20)
    assert (await q.reserve("c", limits, 70)).decision == Decision.ADMIT
    assert await q.backend.release("c")
    assert not await q.backend.release("c") and not await q.backend.commit("a", 20, 0)  # idempotent
    assert (await q.reserve("d", limits, 80)).decision == Decision.ADMIT


async def cost_per_day_and_soft_mode_degrades(q: Harness) -> None:
    soft = [Limits(scope="t", cost_per_day_usd=1.0, soft=True)]
    assert (await q.reserve("a", soft, 0, 0.8)).decision == Decision.ADMIT
    degraded = await q.reserve("b", soft, 0, 0.5)
    assert degraded.decision == Decision.DEGRADE and degraded.violations[0].limit == "cost_per_day"
    hard = [Limits(scope="u", cost_per_day_usd=1.0)]
    await q.reserve("c", hard, 0, 0.8)
    assert (await q.reserve("d", hard, 0, 0.5)).decision == Decision.REJECT
    q.clock.now += 86400
    assert (await q.reserve("e", hard, 0, 0.5)).decision == Decision.ADMIT


async def unrenewed_leases_end_and_renewed_ones_hold(q: Harness) -> None:
    limits = [Limits(scope="t", max_concurrency=1)]
    assert (await q.reserve("a", limits, lease_s=10)).decision == Decision.ADMIT
    refused = await q.reserve("b", limits, lease_s=10)
    assert refused.decision == Decision.REJECT and refused.retry_after_s == pytest.approx(0.1)
    q.clock.now += 8
    assert await q.backend.renew(["a", "never-reserved"], 10) == 1  # a runs on: lease to +18
    q.clock.now += 7  # +15: past the first lease, within the renewed one
    assert (await q.reserve("c", limits, lease_s=10)).decision == Decision.REJECT
    q.clock.now += 4  # +19: a's caller stopped renewing (it died): the slot frees
    assert (await q.reserve("d", limits, lease_s=10)).decision == Decision.ADMIT
    assert await q.backend.expired_count() == 1
    assert not await q.backend.commit("a", 0, 0)
    assert await q.backend.renew(["a"], 10) == 0  # an ended reservation is never revived


async def a_used_id_with_another_request_is_a_conflict(q: Harness) -> None:
    limits = [Limits(scope="t", rpm=5, cost_per_day_usd=10.0)]
    first = await q.reserve("x", limits, 0, 1.0, fingerprint="A")
    assert first.decision == Decision.ADMIT and first.held
    retry = await q.reserve("x", limits, 0, 1.0, fingerprint="A")
    assert retry.decision == Decision.ADMIT and not retry.held  # the first call settles
    for i in range(20):  # 20 different requests under the same id: none admitted, none charged
        other = await q.reserve("x", limits, 0, 1.0, fingerprint=f"B{i}")
        assert other.decision == Decision.CONFLICT and not other.held
    usage = await q.usage(limits)
    assert usage["t:rpm"] == 1 and usage["t:cost_per_day"] == pytest.approx(1.0)


async def a_refused_id_is_judged_anew_on_retry(q: Harness) -> None:
    limits = [Limits(scope="t", rpm=1)]
    assert (await q.reserve("first", limits)).decision == Decision.ADMIT
    refused = await q.reserve("again", limits)
    assert refused.decision == Decision.REJECT and not refused.held
    q.clock.now += refused.retry_after_s + 0.5
    # The client retries with the same id after retry_after: admitted, not the old refusal.
    retried = await q.reserve("again", limits)
    assert retried.decision == Decision.ADMIT and retried.held


async def a_released_id_is_charged_when_retried(q: Harness) -> None:
    """A released reservation served nothing (the request failed before running): its retry
    under the same id is a first request, charged once, not a free repeat."""
    limits = [Limits(scope="t", rpm=5, tpm=100)]
    assert (await q.reserve("x", limits, 30)).held
    assert await q.backend.release("x")
    retry = await q.reserve("x", limits, 30)
    assert retry.decision == Decision.ADMIT and retry.held and not retry.repeat
    usage = await q.usage(limits)
    assert usage["t:rpm"] == 1 and usage["t:tpm"] == pytest.approx(30)


async def all_or_nothing_across_policies(q: Harness) -> None:
    tenant = Limits(scope="t", rpm=10)
    model = Limits(scope="t/m", rpm=1)
    assert (await q.reserve("a", [tenant, model])).decision == Decision.ADMIT
    assert (await q.reserve("b", [tenant, model])).decision == Decision.REJECT
    assert (await q.usage([tenant]))["t:rpm"] == pytest.approx(1)  # the rejected request charged nothing


async def reserving_the_bound_never_overshoots_cost(q: Harness) -> None:
    limits = [Limits(scope="t", cost_per_day_usd=1.0, tpm=1000)]
    bound, actual = 0.03, 0.02  # reserved: an upper bound; committed: what it really cost
    admitted = [
        i for i in range(50) if (await q.reserve(f"c{i}", limits, 30, bound)).decision == Decision.ADMIT
    ]
    for i in admitted:
        await q.backend.commit(f"c{i}", 20, actual)
    more = [
        i for i in range(50, 80) if (await q.reserve(f"c{i}", limits, 30, bound)).decision == Decision.ADMIT
    ]
    for i in more:
        await q.backend.commit(f"c{i}", 20, actual)
    usage = await q.usage(limits)
    assert len(admitted) == 33 and usage["t:cost_per_day"] <= 1.0 + 1e-9
    assert usage["t:cost_per_day"] == pytest.approx((len(admitted) + len(more)) * actual)


async def a_partial_ask_takes_what_the_limits_leave(q: Harness) -> None:
    """A generation asks for prompt + max_tokens but can be cut short: hard tpm and cost
    limits grant what they leave, down to its minimum, and never more."""
    limits = [Limits(scope="t", tpm=200)]
    whole = await q.reserve("a", limits, 150, min_tokens=20)
    assert whole.decision == Decision.ADMIT and whole.tokens == 0  # all of it: as asked
    cut = await q.reserve("b", limits, 150, min_tokens=20)
    assert cut.decision == Decision.ADMIT and cut.tokens == 50  # the 50 that are left
    refused = await q.reserve("c", limits, 150, min_tokens=20)
    assert refused.decision == Decision.REJECT and refused.violations[0].limit == "tpm"
    assert 0 < refused.retry_after_s <= 20 / (200 / 60) + 0.01  # when 20 tokens are back
    assert (await q.usage(limits))["t:tpm"] == pytest.approx(200)
    retry = await q.reserve("b", limits, 150, min_tokens=20)
    assert retry.tokens == 50 and retry.repeat and not retry.held
    # Cost: $0.01 fixed + $0.001 a token, $0.10 a day; half spent by a whole request.
    per_day = [Limits(scope="u", cost_per_day_usd=0.1)]
    assert (await q.reserve("d", per_day, 40, 0.05)).decision == Decision.ADMIT
    priced = await q.reserve("e", per_day, 100, 0.11, min_tokens=10, cost_per_token=0.001)
    assert priced.decision == Decision.ADMIT and priced.tokens == 40  # 0.05 + 0.01 + 0.04
    assert (await q.usage(per_day))["u:cost_per_day"] <= 0.1 + 1e-9
    soft = [Limits(scope="v", tpm=10, soft=True)]
    degraded = await q.reserve("f", soft, 50, min_tokens=5)
    assert degraded.decision == Decision.DEGRADE and degraded.tokens == 0  # soft limits never cut


async def a_charge_adds_only_what_is_new(q: Harness) -> None:
    """A job's cost so far, charged under its account: repeats and stale totals add nothing,
    and the spend is the one real-time requests are judged on."""
    limits = [Limits(scope="t", cost_per_day_usd=1.0)]

    async def charge(
        account: str, total: float, expect: float, over: bool, on: Sequence[Limits] = limits
    ) -> None:
        added, reached = await q.backend.charge(account, on, total)
        assert added == pytest.approx(expect) and reached == over, (account, total, added, reached)

    await charge("job/t/a", 0.25, 0.25, False)
    await charge("job/t/a", 0.25, 0.0, False)  # a repeat
    await charge("job/t/a", 0.6, 0.35, False)
    await charge("job/t/a", 0.5, 0.0, False)  # an older total
    assert (await q.usage(limits))["t:cost_per_day"] == pytest.approx(0.6)
    assert (await q.reserve("r", limits, cost=0.5)).decision == Decision.REJECT
    await charge("job/t/b", 0.4, 0.4, True)
    await charge("job/t/c", 0.0, 0.0, True)  # at the limit: no new job
    await charge("job/s/a", 1.0, 1.0, False, [Limits(scope="s", cost_per_day_usd=0.1, soft=True)])
    q.clock.now += 86_400  # a new day: only what is new counts, today
    await charge("job/t/a", 0.7, 0.1, False)
    assert (await q.usage(limits))["t:cost_per_day"] == pytest.approx(0.1)


ANSWER = bytes(range(256)) * 8
"""A kept answer: binary, every byte value (a serialized protobuf is no text)."""


async def a_repeat_waits_for_the_first_then_gets_its_answer(q: Harness) -> None:
    """With limits or without: the id buys one request; a repeat is told the first still
    runs, then gets the answer its commit carried, and is never held or charged."""
    for n, limits in enumerate(([], [Limits(scope="t", rpm=5)])):
        rid = f"t/{n}"
        first = await q.reserve(rid, limits, fingerprint="A", replayable=True)
        assert first.decision == Decision.ADMIT and first.held and not first.repeat
        running = await q.reserve(rid, limits, fingerprint="A", replayable=True)
        assert running.repeat and running.running and not running.held and not running.answer
        assert await q.backend.commit(rid, 0, 0, ANSWER)
        for _ in range(3):
            again = await q.reserve(rid, limits, fingerprint="A", replayable=True)
            assert again.repeat and not again.running and not again.held and again.answer == ANSWER
        other = await q.reserve(rid, limits, fingerprint="B", replayable=True)
        assert other.decision == Decision.CONFLICT and not other.held
    # One request and its three answered repeats (the waiting one is not counted).
    assert (await q.usage([Limits(scope="t", rpm=5)]))["t:rpm"] == 4


async def a_repeat_of_a_lost_first_call_takes_it_over(q: Harness) -> None:
    """The first call's router died (its lease ran out unrenewed): a repeat takes the
    reservation over and runs the request, held again under its own lease; the request is
    charged once (its first charge, settled by the repeat's commit), and the dead router's
    late commit applies nothing."""
    for n, limits in enumerate(([], [Limits(scope="t", rpm=5, cost_per_day_usd=10, max_concurrency=1)])):
        rid = f"lost/{n}"
        assert (await q.reserve(rid, limits, 0, 1.0, fingerprint="A", lease_s=10, replayable=True)).held
        running = await q.reserve(rid, limits, 0, 1.0, fingerprint="A", lease_s=10, replayable=True)
        assert running.repeat and running.running and not running.held
        q.clock.now += 11
        other = await q.reserve(f"t/other{n}", limits, lease_s=10)
        assert other.decision == Decision.ADMIT  # the lost call's slot was free meanwhile
        assert await q.backend.release(f"t/other{n}")
        taken = await q.reserve(rid, limits, 0, 1.0, fingerprint="A", lease_s=10, replayable=True)
        assert taken.decision == Decision.ADMIT and taken.held and not taken.repeat
        if limits:
            assert (await q.reserve(f"t/third{n}", limits, lease_s=10)).decision == Decision.REJECT
            assert (await q.usage(limits)) == {"t:rpm": 1, "t:cost_per_day": 1.0, "t:max_concurrency": 1}
        assert await q.backend.renew([rid], 10) == 1
        assert await q.backend.commit(rid, 0, 0.4, ANSWER)
        assert not await q.backend.commit(rid, 0, 1.0, b"late")  # the dead router's: applies nothing
        if limits:
            usage = await q.usage(limits)
            assert usage == {"t:rpm": 1, "t:cost_per_day": pytest.approx(0.4), "t:max_concurrency": 0}
        again = await q.reserve(rid, limits, 0, 1.0, fingerprint="A", lease_s=10, replayable=True)
        assert again.repeat and again.answer == ANSWER and not again.held


async def a_tenants_kept_answers_are_bounded_and_freed_when_forgotten(q: Harness) -> None:
    """Past a tenant's budget new answers are not kept (their repeats are refused by the
    router); other tenants keep theirs; a forgotten id frees its bytes."""
    third = KEPT // 3 + 1
    for rid in ("a/1", "a/2", "a/3", "b/1"):
        assert (await q.reserve(rid, [], lease_s=10, replayable=True)).held
        assert await q.backend.commit(rid, 0, 0, b"x" * third)
    answers = [
        len((await q.reserve(r, [], lease_s=10, replayable=True)).answer)
        for r in ("a/1", "a/2", "a/3", "b/1")
    ]
    assert answers == [third, third, 0, third]
    q.clock.now += 10 + 2 * TTL_S + 1  # every id forgotten: their bytes are free again
    assert (await q.reserve("a/4", [], lease_s=10, replayable=True)).held
    assert await q.backend.commit("a/4", 0, 0, b"y" * (KEPT - 1))
    assert (await q.reserve("a/4", [], lease_s=10, replayable=True)).answer == b"y" * (KEPT - 1)


async def replays_count_against_the_request_rate(q: Harness) -> None:
    """A repeat answered from the store counts as a request against rpm (a waiting one does
    not): past the limit it is refused with when to retry, as a new request would be."""
    limits = [Limits(scope="t", rpm=4)]
    assert (await q.reserve("t/r", limits, fingerprint="A", replayable=True)).held
    waiting = await q.reserve("t/r", limits, fingerprint="A", replayable=True)
    assert waiting.running and (await q.usage(limits))["t:rpm"] == 1
    assert await q.backend.commit("t/r", 0, 0, ANSWER)
    for _ in range(3):
        again = await q.reserve("t/r", limits, fingerprint="A", replayable=True)
        assert again.repeat and again.answer == ANSWER
    assert (await q.usage(limits))["t:rpm"] == 4
    refused = await q.reserve("t/r", limits, fingerprint="A", replayable=True)
    assert refused.decision == Decision.REJECT and not refused.held and not refused.answer
    assert refused.violations[0].limit == "rpm" and 59 < refused.retry_after_s <= 60
    assert (await q.reserve("t/new", limits)).decision == Decision.REJECT
    q.clock.now += 60.5
    assert (await q.reserve("t/r", limits, fingerprint="A", replayable=True)).answer == ANSWER


async def a_committed_answer_outlives_its_lease(q: Harness) -> None:
    rid = "t/kept"
    assert (await q.reserve(rid, [], fingerprint="A", lease_s=10, replayable=True)).held
    assert await q.backend.renew([rid], 10) == 1
    assert await q.backend.commit(rid, 0, 0, ANSWER)
    q.clock.now += 60  # the lease is long over; the id is remembered for its TTL
    again = await q.reserve(rid, [], fingerprint="A", lease_s=10, replayable=True)
    assert again.repeat and again.answer == ANSWER


SCENARIOS: list[Callable[[Harness], Awaitable[None]]] = [
    rpm_admits_n_in_any_minute,
    rpm_log_slides_and_a_refund_frees_its_place,
    burst_limits_requests_at_once,
    tokens_settle_on_commit_and_refund_on_release,
    cost_per_day_and_soft_mode_degrades,
    unrenewed_leases_end_and_renewed_ones_hold,
    a_used_id_with_another_request_is_a_conflict,
    a_refused_id_is_judged_anew_on_retry,
    a_released_id_is_charged_when_retried,
    all_or_nothing_across_policies,
    reserving_the_bound_never_overshoots_cost,
    a_partial_ask_takes_what_the_limits_leave,
    a_charge_adds_only_what_is_new,
    a_repeat_waits_for_the_first_then_gets_its_answer,
    a_repeat_of_a_lost_first_call_takes_it_over,
    a_tenants_kept_answers_are_bounded_and_freed_when_forgotten,
    a_committed_answer_outlives_its_lease,
    replays_count_against_the_request_rate,
]
