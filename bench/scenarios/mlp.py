"""``mlp`` at concurrency 1, 16 and 64: Ferryman (router, quota, batcher, node) vs the limit
reference (bench/scenarios/limit_ref.py: one process, grpc.aio and a micro-batcher) vs Ray Serve.

All serve the same seeded weights with 1 torch thread and one batch computing at a time,
and the same closed-loop load generator drives each in this one run (unique inputs, unary
Predict over gRPC). Prints a markdown table with Ferryman's ratios to the limit and to
Ray Serve, writes JSON and a PNG plot.

    python -m bench.scenarios.mlp [--levels 1,16,64] [--no-peer] [--out docs/bench]
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from bench.loadgen import make_inputs_factory
from bench.scenarios.limit_ref import limit_reference
from bench.scenarios.measure import Endpoint, Point, closed_sweep, scenario_options, table, write_json
from bench.scenarios.platform import PlatformSpec, ferryman
from ferryman_server.cli.bench.plot import PlotPoint, plot_latency_vs_throughput
from ferryman_server.kernel.net import free_port

PEER_MAX_BATCH = 32
"""Ray Serve's batch settings as tuned in shared/BASELINES.md."""
PEER_WAIT_MS = 5.0


def ratios(points: Sequence[Point], levels: Sequence[int], other: str) -> str:
    """Ferryman / ``other`` per level (each cell is Ferryman's figure over the other's)."""
    by = {(p.system, p.concurrency): p for p in points}
    lines = [
        f"Ferryman / {other}:",
        "",
        "| concurrency | throughput | p50 | p99 | CPU per request |",
        "|---:|---:|---:|---:|---:|",
    ]
    for c in levels:
        f, r = by.get(("ferryman", c)), by.get((other, c))
        if f is None or r is None:
            continue
        fs, rs = f.summary, r.summary
        lines.append(
            f"| {c} | {fs['throughput_rps'] / rs['throughput_rps']:.2f}x | {fs['p50_ms'] / rs['p50_ms']:.2f} "
            f"| {fs['p99_ms'] / rs['p99_ms']:.2f} | {f.cpu_ms_per_request / r.cpu_ms_per_request:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    def peer_option(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--no-peer", action="store_true", help="Ferryman only (Ray not installed)")

    opts, levels = scenario_options(__doc__, "1,16,64", peer_option)
    inputs = make_inputs_factory()
    with ferryman(PlatformSpec()) as platform:
        points = closed_sweep("ferryman", platform, "mlp", levels, inputs, opts)
        # The same platform over PredictStream: what a client that keeps a stream open gets.
        points += closed_sweep("ferryman-stream", platform, "mlp", levels, inputs, opts, stream=True)
    with limit_reference(limit_port := free_port()) as root:
        limit = Endpoint(address=f"127.0.0.1:{limit_port}", key="unused", pids=[root])
        points += closed_sweep("limit", limit, "mlp", levels, inputs, opts)
    if not opts.no_peer:
        from bench.scenarios.ray_peer import ray_serve

        port = free_port()
        with ray_serve(port, max_batch=PEER_MAX_BATCH, wait_ms=PEER_WAIT_MS) as root:
            peer = Endpoint(address=f"127.0.0.1:{port}", key="unused", pids=[root])
            points += closed_sweep("ray-serve", peer, "mlp", levels, inputs, opts)
    print()
    print(table(points))
    for other in ("limit", "ray-serve"):
        print()
        print(ratios(points, levels, other))
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
