"""Route commands: weights, stickiness, fallback, rollback, shadow traffic."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from ferryman_server.cli.output import JsonFlag, emit, fail, refusals, table
from ferryman_server.cli.registry_cmds import reader, writer
from ferryman_server.kernel.canary import SHADOW_COMPARED, shadow_window
from ferryman_server.kernel.scrape import scrape
from ferryman_server.registry.validation import parse_weights

route_app = typer.Typer(help="Routes: canary weights, stickiness, fallback, shadow.", no_args_is_help=True)


@route_app.command("set")
def route_set(
    model: str,
    targets: Annotated[list[str], typer.Argument(help="VERSION=WEIGHT pairs summing to 100.")],
    sticky: Annotated[str, typer.Option(help="none, tenant or user.")] = "none",
    fallback: Annotated[str, typer.Option(help="Model alias to answer when this one cannot.")] = "",
    as_json: JsonFlag = False,
) -> None:
    """Set a model's route: weights per version, stickiness, fallback."""
    with refusals():
        writer().set_route(model, parse_weights(targets), sticky=sticky, fallback=fallback)
    _print_route(model, as_json)


@route_app.command("rollback")
def route_rollback(model: str, as_json: JsonFlag = False) -> None:
    """Restore the route's previous weights."""
    with refusals():
        writer().rollback_route(model)
    _print_route(model, as_json)


@route_app.command("shadow")
def route_shadow(
    model: str,
    version: Annotated[str, typer.Argument(help="The version mirrored to; empty stops shadowing.")] = "",
    percent: Annotated[int, typer.Option(help="Share of the model's requests mirrored (0..100).")] = 10,
    as_json: JsonFlag = False,
) -> None:
    """Mirror a share of a model's requests to a version that answers nobody and is never
    charged; its answers are compared with the live ones (ferryman_shadow_compared_total)."""
    with refusals():
        writer().set_shadow(model, version, percent)
    _print_route(model, as_json)


@route_app.command("show")
def route_show(model: str, as_json: JsonFlag = False) -> None:
    """Show a model's route."""
    _print_route(model, as_json)


def _print_route(model: str, as_json: bool) -> None:
    route = reader().route(model)
    if route is None:
        fail(f"model {model!r} has no route")
    data = {
        "model": model,
        "targets": dict(route.targets),
        "sticky": route.sticky,
        "fallback": route.fallback,
        "previous_targets": dict(route.previous_targets),
        "shadow": {"version": route.shadow_version, "percent": route.shadow_percent},
    }
    emit(
        data,
        as_json,
        lambda: table(
            f"route {model} (sticky: {route.sticky}, fallback: {route.fallback or '-'}, shadow: "
            + (f"{route.shadow_percent}% to {route.shadow_version})" if route.shadow_percent else "-)"),
            ["version", "weight"],
            [[v, f"{w}%"] for v, w in route.targets],
        ),
    )


@route_app.command("shadow-report")
def route_shadow_report(
    model: str,
    metrics: Annotated[list[str], typer.Option(help="Router metrics URLs (repeat for each router).")],
    window: Annotated[
        float, typer.Option(help="Seconds to watch; 0: everything since the routers started.")
    ] = 0.0,
    as_json: JsonFlag = False,
) -> None:
    """How often each shadow version's answers matched the live ones."""
    try:
        before = scrape(metrics) if window > 0 else {}
        time.sleep(window)
        after = scrape(metrics)
    except OSError as exc:
        fail(f"cannot read metrics: {exc}")
    versions = sorted(
        {
            dict(labels).get("version", "")
            for (name, labels) in after
            if name == SHADOW_COMPARED and dict(labels).get("model") == model
        }
    )
    report = []
    for version in versions:
        compared, differed = shadow_window(before, after, model, version)
        rate = differed / compared if compared else None
        report.append({"version": version, "compared": compared, "differed": differed, "diff_rate": rate})
    emit(
        {"model": model, "window_s": window, "shadows": report},
        as_json,
        lambda: table(
            f"shadow traffic of {model}",
            ["version", "compared", "differed", "diff rate"],
            [
                [
                    r["version"],
                    f"{r['compared']:g}",
                    f"{r['differed']:g}",
                    "-" if r["diff_rate"] is None else f"{r['diff_rate']:.2%}",
                ]
                for r in report
            ],
        ),
    )
