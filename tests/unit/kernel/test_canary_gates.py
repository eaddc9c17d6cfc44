"""The shadow and feedback gates and how verdicts combine (pure)."""

from __future__ import annotations

from ferryman_server.kernel.canary import (
    Gates,
    Moments,
    Outcome,
    Verdict,
    combine,
    judge_feedback,
    judge_shadow,
)

GATES = Gates(min_requests=50, max_diff_rate=0.05, feedback_metric="conversion", alpha=0.05)


def test_shadow_diffs_past_the_threshold_fail_and_below_pass() -> None:
    assert judge_shadow(10, 9, GATES).outcome == Outcome.INCONCLUSIVE
    assert judge_shadow(200, 30, GATES).outcome == Outcome.FAIL
    assert judge_shadow(200, 3, GATES).outcome == Outcome.PASS
    assert judge_shadow(0, 0, Gates()).outcome == Outcome.PASS  # not asked for


def test_feedback_better_passes_worse_fails_and_close_waits() -> None:
    base = Moments(n=400, mean=0.10, variance=0.09)
    better = Moments(n=400, mean=0.30, variance=0.21)
    worse = Moments(n=400, mean=0.02, variance=0.0196)
    close = Moments(n=400, mean=0.095, variance=0.086)
    assert judge_feedback(base, better, GATES).outcome == Outcome.PASS
    verdict = judge_feedback(base, worse, GATES)
    assert verdict.outcome == Outcome.FAIL
    assert verdict.numbers["conversion_lift_high"] < 0
    assert judge_feedback(base, close, GATES).outcome == Outcome.INCONCLUSIVE
    # A margin accepts a candidate no worse than that.
    assert judge_feedback(base, close, Gates(feedback_metric="conversion", feedback_margin=0.1)).outcome == (
        Outcome.PASS
    )
    assert judge_feedback(Moments(10, 0.1, 0.09), better, GATES).outcome == Outcome.INCONCLUSIVE


def test_any_failure_fails_and_any_doubt_waits() -> None:
    ok, doubt, bad = (
        Verdict(Outcome.PASS, ["a"]),
        Verdict(Outcome.INCONCLUSIVE, ["b"]),
        Verdict(Outcome.FAIL, ["c"]),
    )
    assert combine([ok, doubt, bad]).outcome == Outcome.FAIL
    assert combine([ok, doubt, bad]).reasons == ["c"]
    assert combine([ok, doubt]).outcome == Outcome.INCONCLUSIVE
    assert combine([ok, ok]).outcome == Outcome.PASS


def test_a_verdict_without_samples_is_json_safe() -> None:
    verdict = Verdict(Outcome.INCONCLUSIVE, [], {"p99": float("nan"), "n": 3.0})
    assert verdict.as_dict()["numbers"] == {"p99": None, "n": 3.0}
