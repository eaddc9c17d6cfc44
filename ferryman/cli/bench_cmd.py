"""``ferryman bench``: load the Inference API and report throughput, latency and goodput."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import Progress

from ferryman.bench.loadgen import LoadSpec, run
from ferryman.bench.stats import Window, stable, summarize
from ferryman.cli.output import console, fail
from ferryman.cli.predict_cmd import DEFAULT_TARGET, _load
from ferryman.sdk import Client, FerrymanError
from ferryman.sdk.convert import to_inputs
from ferryman.v1 import common_pb2


def bench(
    model: str,
    input: Annotated[str, typer.Option("--input", help="One request's input, as for `ferryman predict`.")],
    target: Annotated[str, typer.Option(help="Router address (env FERRYMAN_TARGET).")] = "",
    key: Annotated[str, typer.Option(help="API key (env FERRYMAN_API_KEY).")] = "",
    concurrency: Annotated[int, typer.Option(help="Closed loop: requests in flight.")] = 1,
    rate: Annotated[
        float, typer.Option(help="Open loop: Poisson arrivals per second (overrides concurrency).")
    ] = 0.0,
    stream: Annotated[
        bool, typer.Option(help="Closed loop over PredictStream instead of unary Predict.")
    ] = False,
    deadline_ms: Annotated[
        float, typer.Option(help="Per-request deadline; goodput counts answers within it.")
    ] = 1000,
    warmup: Annotated[float, typer.Option(help="Seconds of warm-up, not measured.")] = 2.0,
    window: Annotated[float, typer.Option(help="Seconds per measurement window.")] = 5.0,
    max_windows: Annotated[int, typer.Option(help="Stop after this many windows even if not stable.")] = 10,
    json_out: Annotated[Path | None, typer.Option(help="Write the results here as JSON.")] = None,
) -> None:
    """Measure until three windows in a row agree within 10%, then print the summary."""
    api_key = key or os.environ.get("FERRYMAN_API_KEY", "")
    if not api_key:
        fail("an API key is needed: --key or FERRYMAN_API_KEY")
    address = target or os.environ.get("FERRYMAN_TARGET", DEFAULT_TARGET)
    try:
        with Client(address, api_key) as client:
            template = to_inputs(_load(input), client.get_model(model))  # the schema gives dtypes
    except (ValueError, FerrymanError) as exc:
        fail(f"--input: {exc}")

    def make_inputs(_: int) -> list[common_pb2.NamedTensor]:
        return template

    spec = LoadSpec(
        target=address,
        api_key=api_key,
        model=model,
        concurrency=concurrency,
        rate=rate,
        stream=stream,
        deadline_s=deadline_ms / 1000,
        warmup_s=warmup,
        window_s=window,
        max_windows=max_windows,
    )
    windows: list[Window] = []
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("measuring", total=max_windows)

        def on_window(w: Window) -> None:
            windows.append(w)
            progress.update(task, advance=1, description=f"{w.throughput:,.0f} req/s")

        asyncio.run(run(spec, make_inputs, on_window))
    summary: dict[str, Any] = {
        "model": model,
        "mode": "open" if rate > 0 else ("closed-stream" if stream else "closed"),
        "concurrency": concurrency,
        "rate": rate,
        "deadline_ms": deadline_ms,
        "stable": stable(windows),
        **summarize(windows[-3:] if stable(windows) else windows),
        "windows": [
            {
                "seconds": w.seconds,
                "throughput_rps": w.throughput,
                "goodput_rps": w.goodput,
                "errors": w.errors,
            }
            for w in windows
        ],
    }
    if json_out is not None:
        json_out.write_text(json.dumps(summary, indent=2))
    console.print(
        f"{summary['mode']} {model}: {summary['throughput_rps']:,.1f} req/s, "
        f"goodput {summary['goodput_rps']:,.1f}, "
        f"p50 {summary['p50_ms']:.2f} ms, p90 {summary['p90_ms']:.2f} ms, p99 {summary['p99_ms']:.2f} ms, "
        f"errors {summary['errors'] or 'none'}{'' if summary['stable'] else ' (did not stabilize)'}"
    )
