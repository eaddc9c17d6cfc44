"""``ferryman canary``: judge a canary version against its baseline from the routers' own
metrics over one window (``ferryman.canary``). Exit code 0: pass, 1: fail, 2: inconclusive."""

from __future__ import annotations

import json
import math
import time
from typing import Annotated

import typer
from rich.table import Table

from ferryman.canary import Gates, Outcome, VersionWindow, judge
from ferryman.cli.output import console, fail
from ferryman.errors import SERVER_FAULTS
from ferryman.top import Samples, latency_buckets, scrape

EXIT_CODES = {Outcome.PASS: 0, Outcome.FAIL: 1, Outcome.INCONCLUSIVE: 2}
FAULT_NAMES = frozenset(code.name for code in SERVER_FAULTS)


def version_window(before: Samples, after: Samples, model: str, version: str) -> VersionWindow:
    """One version's requests, server errors and latency buckets between two scrapes."""

    def grew(key: tuple[str, tuple[tuple[str, str], ...]], value: float) -> float:
        return value - before.get(key, 0.0)

    requests = errors = 0.0
    for key, value in after.items():
        name, labels = key
        fields = dict(labels)
        if name != "ferryman_requests_total" or (fields.get("model"), fields.get("version")) != (
            model,
            version,
        ):
            continue
        requests += grew(key, value)
        errors += grew(key, value) if fields.get("code") in FAULT_NAMES else 0.0
    where = {"model": model}
    now = latency_buckets(after, by="version", where=where).get(version, {})
    then = latency_buckets(before, by="version", where=where).get(version, {})
    latency = {bound: count - then.get(bound, 0.0) for bound, count in now.items()}
    return VersionWindow(requests=requests, server_errors=errors, latency=latency)


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
        numbers = {k: None if math.isnan(v) else v for k, v in verdict.numbers.items()}
        print(json.dumps({"outcome": verdict.outcome.value, "reasons": verdict.reasons, "numbers": numbers}))
    else:
        table = Table(title=f"{model}: {candidate} against {baseline}, {window:g} s")
        table.add_column("figure")
        table.add_column("value", justify="right")
        for name, value in verdict.numbers.items():
            table.add_row(name, f"{value:.4g}")
        console.print(table)
        console.print(f"[bold]{verdict.outcome.value}[/bold]: " + "; ".join(verdict.reasons))
    raise typer.Exit(EXIT_CODES[verdict.outcome])
