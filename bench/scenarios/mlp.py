"""``mlp`` at concurrency 1, 16 and 64: Ferryman (router, quota, batcher, node) vs Ray Serve.

Both serve the same seeded weights with 1 torch thread and one batch computing at a time,
and the same closed-loop load generator drives both in this one run (unique inputs, unary
Predict over gRPC). Prints a markdown table with the ratios, writes JSON and a PNG plot.

    python -m bench.scenarios.mlp [--levels 1,16,64] [--no-peer] [--out docs/bench]
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from bench.loadgen import make_inputs_factory
from bench.scenarios.measure import Point, measure, table, write_json
from bench.scenarios.platform import PlatformSpec, ferryman
from ferryman.bench.loadgen import LoadSpec
from ferryman.bench.plot import PlotPoint, plot_latency_vs_throughput
from ferryman.net import free_port

DEADLINE_S = 5.0
"""Closed loop: a generous deadline, so latency (not refusals) is what is compared."""
PEER_MAX_BATCH = 32
"""Ray Serve's batch settings as tuned in shared/BASELINES.md."""
PEER_WAIT_MS = 5.0


def sweep(
    system: str,
    target: str,
    key: str,
    levels: Sequence[int],
    roots: list[int],
    opts: argparse.Namespace,
    stream: bool = False,
) -> list[Point]:
    points = []
    for c in levels:
        spec = LoadSpec(
            target=target,
            api_key=key,
            model="mlp",
            concurrency=c,
            stream=stream,
            deadline_s=DEADLINE_S,
            warmup_s=opts.warmup,
            window_s=opts.window,
            max_windows=opts.max_windows,
        )
        point = measure(system, f"c={c}", spec, make_inputs_factory(), roots)
        print(table([point]).splitlines()[-1], flush=True)
        points.append(point)
    return points


def ratios(points: Sequence[Point], levels: Sequence[int]) -> str:
    """Ferryman / Ray Serve per level (each cell is Ferryman's figure over Ray Serve's)."""
    by = {(p.system, p.concurrency): p for p in points}
    lines = [
        "| concurrency | throughput | p50 | p99 | CPU per request |",
        "|---:|---:|---:|---:|---:|",
    ]
    for c in levels:
        f, r = by.get(("ferryman", c)), by.get(("ray-serve", c))
        if f is None or r is None:
            continue
        fs, rs = f.summary, r.summary
        lines.append(
            f"| {c} | {fs['throughput_rps'] / rs['throughput_rps']:.1f}x | {fs['p50_ms'] / rs['p50_ms']:.2f} "
            f"| {fs['p99_ms'] / rs['p99_ms']:.2f} | {f.cpu_ms_per_request / r.cpu_ms_per_request:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--levels", default="1,16,64", help="comma-separated concurrencies")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--window", type=float, default=4.0)
    parser.add_argument("--max-windows", type=int, default=6)
    parser.add_argument("--no-peer", action="store_true", help="Ferryman only (Ray not installed)")
    parser.add_argument("--out", type=Path, default=Path("docs/bench"))
    opts = parser.parse_args()
    levels = [int(c) for c in opts.levels.split(",")]
    with ferryman(PlatformSpec()) as platform:
        points = sweep("ferryman", platform.router, platform.key, levels, platform.pids, opts)
        # The same platform over PredictStream: what a client that keeps a stream open gets.
        points += sweep("ferryman-stream", platform.router, platform.key, levels, platform.pids, opts, True)
    if not opts.no_peer:
        from bench.scenarios.ray_peer import ray_serve

        port = free_port()
        with ray_serve(port, max_batch=PEER_MAX_BATCH, wait_ms=PEER_WAIT_MS) as root:
            points += sweep("ray-serve", f"127.0.0.1:{port}", "unused", levels, [root], opts)
    print()
    print(table(points))
    print()
    print(ratios(points, levels))
    write_json(opts.out / "mlp.json", "mlp", points)
    series: dict[str, list[PlotPoint]] = {}
    for p in points:
        s = p.summary
        series.setdefault(p.system, []).append(
            PlotPoint(p.label, s["throughput_rps"], s["p50_ms"], s["p99_ms"])
        )
    plot = plot_latency_vs_throughput(
        series, opts.out / "mlp.png", "mlp, closed loop c=1/16/64 (2 vCPU, CPU only)"
    )
    print(f"\nwrote {opts.out / 'mlp.json'} and {plot}")


if __name__ == "__main__":
    main()
