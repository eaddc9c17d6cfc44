"""``ferryman canary``: judge a canary version against its baseline from the routers' own
metrics over one window (``ferryman_server.kernel.canary``). Exit code 0: pass, 1: fail, 2: inconclusive."""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer
from rich.table import Table

from ferryman_server.cli.output import console, fail
from ferryman_server.kernel.canary import Gates, Outcome, judge, version_window
from ferryman_server.kernel.scrape import scrape

EXIT_CODES = {Outcome.PASS: 0, Outcome.FAIL: 1, Outcome.INCONCLUSIVE: 2}


def canary(
    model: Annotated[str, typer.Argument(help="The model whose versions are compared.")],
    baseline: Annotated[str, typer.Option(help="The version serving today.")],
    candidate: Annotated[str, typer.Option("--canary", help="The version under test.")],
    metrics: Annotated[list[str], typer.Option(help="Router metrics URLs (repeat for each router).")],
    window: Annotated[float, typer.Option(help="Seconds of traffic to judge.")] = 60.0,
    min_requests: Annotated[int, typer.Option(help="Requests per version before concluding.")] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="Print the verdict as one JSON line.")] = False,
) -> None:
    """Compare the canary's server errors and latency with the baseline's, same window."""
    try:
        before = scrape(metrics)
        time.sleep(window)
        after = scrape(metrics)
    except OSError as exc:
        fail(f"cannot read metrics: {exc}")
    verdict = judge(
        version_window(before, after, model, baseline),
        version_window(before, after, model, candidate),
        Gates(min_requests=min_requests),
    )
    if as_json:
        print(json.dumps(verdict.as_dict()))
    else:
        table = Table(title=f"{model}: {candidate} against {baseline}, {window:g} s")
        table.add_column("figure")
        table.add_column("value", justify="right")
        for name, value in verdict.numbers.items():
            table.add_row(name, f"{value:.4g}")
        console.print(table)
        console.print(f"[bold]{verdict.outcome.value}[/bold]: " + "; ".join(verdict.reasons))
    raise typer.Exit(EXIT_CODES[verdict.outcome])
