"""``ferryman bench``: load the Inference API and report throughput, latency and goodput."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import Progress

from ferryman.sdk import Client, FerrymanError
from ferryman.sdk.client import endpoint
from ferryman.sdk.convert import to_inputs
from ferryman.v1 import common_pb2
from ferryman_server.cli.bench.loadgen import InputsFactory, LoadSpec, run
from ferryman_server.cli.bench.plot import PlotPoint, plot_latency_vs_throughput
from ferryman_server.cli.bench.stats import Window, stable, summarize
from ferryman_server.cli.output import console, fail
from ferryman_server.cli.predict_cmd import _load


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
    sweep: Annotated[
        str, typer.Option(help="Comma-separated concurrencies to run in turn (closed loop), e.g. 1,16,64.")
    ] = "",
    plot: Annotated[
        Path | None, typer.Option(help="Write latency vs throughput as a PNG (needs matplotlib).")
    ] = None,
) -> None:
    """Measure until three windows in a row agree within 10%, then print the summary.

    With --sweep, one such measurement per concurrency; --json-out then holds {"runs": [...]}."""
    try:
        address, api_key = endpoint(target, key)
    except ValueError as exc:
        fail(str(exc))
    try:
        with Client(address, api_key) as client:
            template = to_inputs(_load(input), client.get_model(model))  # the schema gives dtypes
    except (ValueError, FerrymanError) as exc:
        fail(f"--input: {exc}")

    def make_inputs(_: int) -> list[common_pb2.NamedTensor]:
        return template

    try:
        levels = [int(c) for c in sweep.split(",") if c.strip()] if sweep else [concurrency]
    except ValueError:
        fail(f"--sweep: comma-separated integers, got {sweep!r}")
    if rate > 0 and sweep:
        fail("--sweep is for the closed loop; it cannot be combined with --rate")
    summaries = []
    for level in levels:
        spec = LoadSpec(
            target=address,
            api_key=api_key,
            model=model,
            concurrency=level,
            rate=rate,
            stream=stream,
            deadline_s=deadline_ms / 1000,
            warmup_s=warmup,
            window_s=window,
            max_windows=max_windows,
        )
        summary = _measure(spec, make_inputs)
        summaries.append(summary)
        console.print(
            f"{summary['mode']} {model} c={level}: {summary['throughput_rps']:,.1f} req/s, "
            f"goodput {summary['goodput_rps']:,.1f}, "
            f"p50 {summary['p50_ms']:.2f} ms, p90 {summary['p90_ms']:.2f} ms, "
            f"p99 {summary['p99_ms']:.2f} ms, errors {summary['errors'] or 'none'}"
            f"{'' if summary['stable'] else ' (did not stabilize)'}"
        )
    if json_out is not None:
        record = summaries[0] if len(summaries) == 1 and not sweep else {"runs": summaries}
        json_out.write_text(json.dumps(record, indent=2))
    if plot is not None:
        points = [
            PlotPoint(
                f"c={s['concurrency']}" if s["mode"] != "open" else f"{s['rate']:g}/s",
                s["throughput_rps"],
                s["p50_ms"],
                s["p99_ms"],
            )
            for s in summaries
        ]
        try:
            plot_latency_vs_throughput({address: points}, plot, f"{model}: latency vs throughput")
        except RuntimeError as exc:
            fail(str(exc))


def _measure(spec: LoadSpec, make_inputs: InputsFactory) -> dict[str, Any]:
    """One measurement with a progress bar; the summary as ``--json-out`` writes it."""
    windows: list[Window] = []
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("measuring", total=spec.max_windows)

        def on_window(w: Window) -> None:
            windows.append(w)
            progress.update(task, advance=1, description=f"{w.throughput:,.0f} req/s")

        asyncio.run(run(spec, make_inputs, on_window))
    return {
        "model": spec.model,
        "mode": ("open" if spec.rate > 0 else "closed") + ("-stream" if spec.stream else ""),
        "concurrency": spec.concurrency,
        "rate": spec.rate,
        "deadline_ms": spec.deadline_s * 1000,
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
