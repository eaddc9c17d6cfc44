"""``ferryman top``: a live terminal view of QPS, latency, errors and batch fill per model."""

from __future__ import annotations

import math
import time
from typing import Annotated

import typer
from rich.live import Live
from rich.table import Table

from ferryman_server.cli.output import console, fail
from ferryman_server.kernel.scrape import ModelRow, rows, scrape


def _ms(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{seconds * 1000:.1f}"


def render(model_rows: list[ModelRow], interval: float) -> Table:
    table = Table(title=f"Ferryman — last {interval:g} s")
    for column in ("model", "req/s", "errors/s", "p50 ms", "p99 ms", "batch fill"):
        table.add_column(column, justify="right" if column != "model" else "left")
    for row in model_rows:
        fill = "-" if math.isnan(row.fill) else f"{row.fill:.0%}"
        table.add_row(
            row.model, f"{row.qps:.1f}", f"{row.errors_per_s:.1f}", _ms(row.p50_s), _ms(row.p99_s), fill
        )
    return table


def top(
    metrics: Annotated[
        list[str], typer.Argument(help="Metrics URLs (routers, batchers), e.g. from `up --json`.")
    ],
    interval: Annotated[float, typer.Option(help="Seconds between refreshes.")] = 2.0,
    once: Annotated[bool, typer.Option(help="Print one view and exit (for scripts).")] = False,
) -> None:
    """Watch QPS, p50/p99, errors and batch fill per model."""
    try:
        before, started = scrape(metrics), time.monotonic()
        if once:
            time.sleep(interval)
            console.print(render(rows(before, scrape(metrics), time.monotonic() - started), interval))
            return
        with Live(render([], interval), console=console, refresh_per_second=4) as live:
            while True:
                time.sleep(interval)
                after, now = scrape(metrics), time.monotonic()
                live.update(render(rows(before, after, now - started), interval))
                before, started = after, now
    except OSError as exc:
        fail(f"cannot read metrics: {exc}")
    except KeyboardInterrupt:
        return
