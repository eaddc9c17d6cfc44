"""``ferryman rollout``: progressive rollouts gated by analysis; ``ferryman experiment``: the
tenants' outcome metrics per version."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import typer

from ferryman_server.cli.output import JsonFlag, console, emit, fail, refusals, table
from ferryman_server.cli.registry_cmds import reader, writer
from ferryman_server.kernel.canary import Gates, lift
from ferryman_server.registry.rollout.status import status
from ferryman_server.registry.rollout.writes import DEFAULT_STEPS
from ferryman_server.registry.tables import Rollout

rollout_app = typer.Typer(help="Progressive rollouts: weight steps gated by analysis.", no_args_is_help=True)
experiment_app = typer.Typer(help="Experiments: tenants' outcome metrics per version.", no_args_is_help=True)

DEFAULT_GATES = Gates()


def _steps(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        fail(f"steps must be comma-separated integers, got {text!r}")


@rollout_app.command("start")
def rollout_start(
    model: str,
    to: Annotated[str, typer.Option("--to", help="The candidate version.")],
    steps: Annotated[str, typer.Option(help="Candidate weight per step, rising to 100.")] = ",".join(
        map(str, DEFAULT_STEPS)
    ),
    dwell: Annotated[float, typer.Option(help="Least seconds per step.")] = 60.0,
    min_requests: Annotated[int, typer.Option(help="Samples per version before a verdict.")] = 50,
    alpha: Annotated[float, typer.Option(help="Significance level of the tests.")] = DEFAULT_GATES.alpha,
    max_error_increase: Annotated[
        float, typer.Option(help="Server-error rate the candidate may add (absolute).")
    ] = DEFAULT_GATES.max_error_increase,
    latency_margin: Annotated[
        float, typer.Option(help="P(candidate slower) may exceed 0.5 by this.")
    ] = DEFAULT_GATES.latency_margin,
    min_latency_increase: Annotated[
        float, typer.Option(help="And its mean service time must be this share above (0.2: 20%).")
    ] = DEFAULT_GATES.min_latency_increase,
    warmup: Annotated[
        float, typer.Option(help="Seconds of each step not judged (the candidate warming up).")
    ] = DEFAULT_GATES.warmup_s,
    max_diff_rate: Annotated[
        float | None, typer.Option(help="Share of shadowed answers that may differ (unset: not checked).")
    ] = None,
    feedback: Annotated[str, typer.Option(help="A Feedback metric the candidate must not be worse on.")] = "",
    feedback_margin: Annotated[float, typer.Option(help="How much lower its mean may be.")] = 0.0,
    as_json: JsonFlag = False,
) -> None:
    """Start moving a model from the version taking all its traffic to --to, step by step."""
    gates = Gates(
        min_requests=min_requests,
        alpha=alpha,
        max_error_increase=max_error_increase,
        latency_margin=latency_margin,
        min_latency_increase=min_latency_increase,
        warmup_s=warmup,
        max_diff_rate=max_diff_rate,
        feedback_metric=feedback,
        feedback_margin=feedback_margin,
    )
    with refusals():
        rollout = writer().start_rollout(model, to, steps=_steps(steps), dwell_s=dwell, gates=gates)
    _show(rollout, as_json)


@rollout_app.command("status")
def rollout_status(
    model: Annotated[str, typer.Argument(help="A model (default: every rollout in progress).")] = "",
    as_json: JsonFlag = False,
) -> None:
    """The rollout's state, step, weights, latest verdict and time to the next step."""
    if not model:
        views = [status(r) for r in reader().live_rollouts()]
        emit(views, as_json, lambda: _table(views))
        return
    found = reader().rollouts(model, limit=1)
    if not found:
        fail(f"{model!r} has never been rolled out")
    _show(found[0], as_json)


@rollout_app.command("pause")
def rollout_pause(model: str, as_json: JsonFlag = False) -> None:
    """Hold the weights where they are."""
    with refusals():
        _show(writer().pause_rollout(model), as_json)


@rollout_app.command("resume")
def rollout_resume(model: str, as_json: JsonFlag = False) -> None:
    """Go on from the current step once the candidate is warm."""
    with refusals():
        _show(writer().resume_rollout(model), as_json)


@rollout_app.command("abort")
def rollout_abort(model: str, as_json: JsonFlag = False) -> None:
    """End the rollout with all traffic back on the baseline (one registry revision)."""
    with refusals():
        _show(writer().abort_rollout(model), as_json)


def _show(rollout: Rollout, as_json: bool) -> None:
    view = status(rollout)
    emit(view, as_json, lambda: _table([view]))


def _table(views: list[dict[str, Any]]) -> None:
    rows = [
        [
            f"{v['model']} {v['baseline']} -> {v['candidate']}",
            v["state"],
            f"{v['step']}/{len(v['steps'])}",
            f"{v['candidate_weight']}%",
            "-" if v["next_step_in_s"] is None else f"{v['next_step_in_s']:.0f} s",
            v["last_check"].get("outcome", "-"),
            v["reason"] or v["last_check"].get("reason", ""),
        ]
        for v in views
    ]
    table("rollouts", ["rollout", "state", "step", "weight", "next step", "verdict", "why"], rows)


@experiment_app.command("report")
def experiment_report(
    model: str,
    metric: Annotated[str, typer.Option(help="The Feedback metric compared.")],
    baseline: Annotated[str, typer.Option(help="The version others are compared with.")] = "",
    hours: Annotated[float, typer.Option(help="Reports of the last this many hours.")] = 24.0,
    alpha: Annotated[float, typer.Option(help="1 - confidence of the intervals.")] = 0.05,
    as_json: JsonFlag = False,
) -> None:
    """Each version's mean of a tenant outcome metric with its confidence interval, and each
    one's difference from the baseline's."""
    since = datetime.now(UTC) - timedelta(hours=hours)
    moments = reader().feedback_moments(model, metric, since)
    if not moments:
        fail(f"no {metric!r} feedback on {model!r} in the last {hours:g} h")
    base = baseline or max(moments, key=lambda v: moments[v].n)
    if base not in moments:
        fail(f"no {metric!r} feedback on {model}:{base}")
    versions = []
    for version, m in sorted(moments.items()):
        low, high = m.interval(alpha)
        diff, diff_low, diff_high = lift(moments[base], m, alpha)
        versions.append(
            {
                "version": version,
                "n": int(m.n),
                "mean": m.mean,
                "interval": [low, high],
                "lift": diff,
                "lift_interval": [diff_low, diff_high],
            }
        )
    report = {
        "model": model,
        "metric": metric,
        "baseline": base,
        "confidence": 1 - alpha,
        "versions": versions,
    }
    emit(report, as_json, lambda: _report_table(report))


def _report_table(report: dict[str, Any]) -> None:
    rows = [
        [
            v["version"],
            v["n"],
            f"{v['mean']:.4g} [{v['interval'][0]:.4g}, {v['interval'][1]:.4g}]",
            f"{v['lift']:+.4g} [{v['lift_interval'][0]:+.4g}, {v['lift_interval'][1]:+.4g}]",
        ]
        for v in report["versions"]
    ]
    title = f"{report['model']}: {report['metric']} ({report['confidence']:.0%} intervals)"
    table(title, ["version", "reports", "mean", f"lift over {report['baseline']}"], rows)
    console.print("a lift whose interval excludes 0 is a difference the data supports")
