"""Overload: ``mlp`` offered 3x its measured capacity, every request with a 50 ms deadline.

Capacity is the closed-loop throughput at concurrency 64. Then open-loop Poisson load at 1x
and at 3x that rate; goodput counts answers within the deadline. Refusals should come back at
once (RESOURCE_EXHAUSTED with RetryInfo) and goodput at 3x should hold near goodput at 1x.
Runs once with the router's shedding on (the default) and once with it off.

    python -m bench.scenarios.overload [--factor 3] [--deadline-ms 50] [--out docs/bench]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from bench.loadgen import make_inputs_factory
from bench.scenarios.measure import Point, cpu_seconds, measure, table, write_json
from bench.scenarios.platform import PlatformSpec, ferryman
from ferryman.bench.loadgen import LoadSpec

CAPACITY_CONCURRENCY = 64
CAPACITY_DEADLINE_S = 5.0
REFUSAL = "RESOURCE_EXHAUSTED"


def run_config(label: str, shed: bool, opts: argparse.Namespace) -> list[Point]:
    spec = PlatformSpec(env={"FERRYMAN_ROUTER_SHED_OVERLOAD": str(shed).lower()})
    deadline_s = opts.deadline_ms / 1000
    with ferryman(spec) as platform:

        def load(**kw: Any) -> LoadSpec:
            return LoadSpec(
                target=platform.router,
                api_key=platform.key,
                model="mlp",
                warmup_s=opts.warmup,
                window_s=opts.window,
                max_windows=opts.max_windows,
                **kw,
            )

        capacity = measure(
            label,
            f"capacity (closed c={CAPACITY_CONCURRENCY})",
            load(concurrency=CAPACITY_CONCURRENCY, deadline_s=CAPACITY_DEADLINE_S),
            make_inputs_factory(),
            platform.pids,
        )
        rate = float(capacity.summary["throughput_rps"])
        points = [capacity]
        print(table(points).splitlines()[-1], flush=True)
        for factor in (1.0, opts.factor):
            client_before = cpu_seconds([os.getpid()])
            point = measure(
                label,
                f"open {factor:g}x = {rate * factor:,.0f}/s, {opts.deadline_ms:g} ms deadline",
                load(rate=rate * factor, deadline_s=deadline_s),
                make_inputs_factory(),
                platform.pids,
            )
            client = cpu_seconds([os.getpid()]) - client_before
            print(table([point]).splitlines()[-1], f"(load generator CPU {client:.1f} s)", flush=True)
            points.append(point)
    return points


def verdict(points: list[Point], factor: float) -> str:
    """Goodput at factor x over goodput at 1x, and how fast refusals came back."""
    at_one, at_factor = points[1].summary, points[2].summary
    ratio = at_factor["goodput_rps"] / at_one["goodput_rps"] if at_one["goodput_rps"] else float("nan")
    refusals = at_factor["error_latency_ms"].get(REFUSAL)
    timing = (
        f"refusals p50 {refusals['p50']:.1f} ms, p99 {refusals['p99']:.1f} ms" if refusals else "no refusals"
    )
    return f"{points[0].system}: goodput at {factor:g}x / at 1x = {ratio:.2f}; {timing}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--factor", type=float, default=3.0)
    parser.add_argument("--deadline-ms", type=float, default=50.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--window", type=float, default=4.0)
    parser.add_argument("--max-windows", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("docs/bench"))
    opts = parser.parse_args()
    results = {
        "ferryman (router shedding on)": run_config("ferryman (router shedding on)", True, opts),
        "ferryman (router shedding off)": run_config("ferryman (router shedding off)", False, opts),
    }
    points = [p for ps in results.values() for p in ps]
    print()
    print(table(points))
    print()
    verdicts = [verdict(ps, opts.factor) for ps in results.values()]
    print("\n".join(verdicts))
    write_json(opts.out / "overload.json", "overload", points, {"verdicts": verdicts})


if __name__ == "__main__":
    main()
