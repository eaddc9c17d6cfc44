"""The SDK's client-side adaptive throttling (pure: a fake clock and a seeded rng)."""

from __future__ import annotations

import random

import grpc
import pytest

from ferryman.errors import Reason
from ferryman.sdk.throttle import WINDOW_S, AdaptiveThrottle


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def throttle(clock: Clock) -> AdaptiveThrottle:
    return AdaptiveThrottle(clock=clock, rng=random.Random(7))


def test_accepted_requests_are_never_refused_locally() -> None:
    t = throttle(Clock())
    for _ in range(1000):
        assert t.admit()
        t.answered(grpc.StatusCode.OK)
    assert t.rejection_probability() == 0.0
    # Errors an overloaded platform does not answer with (a bad input, a missing model, a
    # router that is down: retried and reported as such) do not throttle either.
    for code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNAVAILABLE):
        for _ in range(1000):
            assert t.admit()
            t.answered(code)
    assert t.rejection_probability() == 0.0


@pytest.mark.parametrize("code", [grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED])
def test_answers_past_the_deadline_throttle_as_refusals_do(code: grpc.StatusCode) -> None:
    # Past capacity the router answers most requests too late (DEADLINE_EXCEEDED): not an accept.
    t = throttle(Clock())
    sent = 0
    for _ in range(2000):
        if t.admit():
            sent += 1
            t.answered(code)
    assert sent < 100, sent
    assert t.rejection_probability() > 0.9


def test_a_refused_client_stops_sending_most_requests_and_recovers() -> None:
    clock = Clock()
    t = throttle(clock)
    for _ in range(100):  # healthy
        t.admit()
        t.answered(grpc.StatusCode.OK)
    sent = 0
    for _ in range(2000):  # the platform refuses everything
        if t.admit():
            sent += 1
            t.answered(grpc.StatusCode.RESOURCE_EXHAUSTED)
    # Past k requests per accept, most never leave the client (about 201 * ln(21) ~ 610
    # of the 2,000 are sent while the window still holds the 100 accepts).
    assert sent < 700, sent
    assert t.rejection_probability() > 0.85
    # The window slides: once the refusals are old, requests flow again.
    clock.now += WINDOW_S + 1
    assert t.rejection_probability() == 0.0
    assert t.admit()


def test_a_client_offering_three_times_capacity_sends_about_k_times_it() -> None:
    clock = Clock()
    t = throttle(clock)
    sent = 0
    for _ in range(3000):  # a second of time per round: 3 requests offered, 1 accepted
        accepted_this_round = False
        for _ in range(3):
            if not t.admit():
                continue
            sent += 1
            code = grpc.StatusCode.RESOURCE_EXHAUSTED if accepted_this_round else grpc.StatusCode.OK
            accepted_this_round = True
            t.answered(code)
        clock.now += 1.0
    # SRE's K = 2: about twice what the server takes, instead of three times.
    assert 1.8 < sent / 3000 < 2.2, sent


def test_off_it_refuses_nothing() -> None:
    t = AdaptiveThrottle(enabled=False, clock=Clock())
    for _ in range(1000):
        assert t.admit()
        t.answered(grpc.StatusCode.RESOURCE_EXHAUSTED)
    assert t.rejection_probability() == 0.0


def test_requests_that_spill_into_jobs_are_never_throttled() -> None:
    # Refused but accepted as jobs: the server took them, and refusing locally would lose them.
    t = throttle(Clock())
    for _ in range(2000):
        assert t.admit()
        t.answered(grpc.StatusCode.RESOURCE_EXHAUSTED, Reason.ACCEPTED_AS_JOB)
    assert t.rejection_probability() == 0.0


def test_the_tenants_own_quota_refusals_are_no_sign_of_overload() -> None:
    # At its own rate limit a tenant is told when to retry: the platform is not failing.
    t = throttle(Clock())
    for _ in range(2000):
        assert t.admit()
        t.answered(grpc.StatusCode.RESOURCE_EXHAUSTED, Reason.QUOTA_EXCEEDED)
    assert t.rejection_probability() == 0.0
    # The platform's own refusals still count.
    t = throttle(Clock())
    for _ in range(2000):
        if t.admit():
            t.answered(grpc.StatusCode.RESOURCE_EXHAUSTED, Reason.OVERLOADED)
    assert t.rejection_probability() > 0.9


def test_the_callers_own_too_short_deadline_is_no_sign_of_overload() -> None:
    # A deadline the version never meets even idle is the caller's; a deadline missed in the
    # queue (DEADLINE_UNMEETABLE) is load, and still counts.
    t = throttle(Clock())
    for _ in range(2000):
        assert t.admit()
        t.answered(grpc.StatusCode.DEADLINE_EXCEEDED, Reason.DEADLINE_TOO_SHORT)
    assert t.rejection_probability() == 0.0
    t = throttle(Clock())
    for _ in range(2000):
        if t.admit():
            t.answered(grpc.StatusCode.DEADLINE_EXCEEDED, Reason.DEADLINE_UNMEETABLE)
    assert t.rejection_probability() > 0.9


def test_a_burst_in_flight_is_not_taken_for_refusals() -> None:
    # A fresh client with 200 requests in flight and no answer yet: nothing was refused.
    t = throttle(Clock())
    assert all(t.admit() for _ in range(200))
    assert t.rejection_probability() == 0.0
