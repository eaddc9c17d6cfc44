"""Overload: ``mlp`` offered 3x its measured capacity, every request with a 50 ms deadline.

Capacity is the open-loop (Poisson) rate with the most goodput (answers within the deadline)
among fractions of the closed-loop throughput at concurrency 64. Then the same load at 3x that
rate. Refusals should come back at once (RESOURCE_EXHAUSTED with RetryInfo) and goodput at 3x
should hold near goodput at capacity. Runs unary with the router's shedding on and off, and
over PredictStream (each request with its own timeout) with shedding on.

    python -m bench.scenarios.overload [--factor 3] [--deadline-ms 50] [--out docs/bench]
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from bench.loadgen import make_inputs_factory
from bench.scenarios.measure import Point, add_window_args, cpu_seconds, load_spec, measure, table, write_json
from bench.scenarios.platform import PlatformSpec, ferryman
from ferryman_server.cli.bench.loadgen import LoadSpec

CAPACITY_CONCURRENCY = 64
SEARCH_FRACTIONS = (0.3, 0.45, 0.6, 0.75, 0.9)
"""Open-loop rates tried, as fractions of the closed-loop throughput."""
CAPACITY_DEADLINE_S = 5.0
REFUSAL = "RESOURCE_EXHAUSTED"


STREAMS = 8
"""Open loop over PredictStream: requests spread over this many streams."""


def run_config(label: str, shed: bool, stream: bool, opts: argparse.Namespace) -> list[Point]:
    spec = PlatformSpec(env={"FERRYMAN_ROUTER_SHED_OVERLOAD": str(shed).lower()})
    deadline_s = opts.deadline_ms / 1000
    with ferryman(spec) as platform:

        def load(**kw: Any) -> LoadSpec:
            return load_spec(platform, "mlp", opts, **kw)

        capacity = measure(
            label,
            f"closed loop c={CAPACITY_CONCURRENCY}",
            load(concurrency=CAPACITY_CONCURRENCY, deadline_s=CAPACITY_DEADLINE_S),
            make_inputs_factory(),
            platform.pids,
        )
        closed_rps = float(capacity.summary["throughput_rps"])
        points = [capacity]
        print(table(points).splitlines()[-1], flush=True)

        def open_loop(rate: float, name: str) -> Point:
            client_before = cpu_seconds([os.getpid()])
            point = measure(
                label,
                f"{name}: open {rate:,.0f}/s, {opts.deadline_ms:g} ms deadline",
                load(rate=rate, deadline_s=deadline_s, stream=stream, concurrency=STREAMS),
                make_inputs_factory(),
                platform.pids,
            )
            client = cpu_seconds([os.getpid()]) - client_before
            print(table([point]).splitlines()[-1], f"(load generator CPU {client:.1f} s)", flush=True)
            return point

        search = [open_loop(closed_rps * f, f"search {f:g}x closed") for f in SEARCH_FRACTIONS]
        best = max(search, key=lambda p: float(p.summary["goodput_rps"]))
        points += search
        # Halfway first: where overload starts to bite, then the factor the target names.
        for factor in (1 + (opts.factor - 1) / 2, opts.factor):
            points.append(open_loop(best.rate * factor, f"{factor:g}x capacity"))
    return points


def verdict(points: list[Point], factor: float) -> str:
    """Goodput at factor x over goodput at capacity, and how fast refusals came back."""
    searched = points[1 : 1 + len(SEARCH_FRACTIONS)]
    at_one = max((p.summary for p in searched), key=lambda s: float(s["goodput_rps"]))
    at_factor = points[-1].summary
    ratio = at_factor["goodput_rps"] / at_one["goodput_rps"] if at_one["goodput_rps"] else float("nan")
    refusals = at_factor["error_latency_ms"].get(REFUSAL)
    timing = (
        f"refusals p50 {refusals['p50']:.1f} ms, p99 {refusals['p99']:.1f} ms" if refusals else "no refusals"
    )
    return (
        f"{points[0].system}: capacity {at_one['goodput_rps']:,.0f} good/s; at {factor:g}x "
        f"{at_factor['goodput_rps']:,.0f} good/s = {ratio:.2f} of it; {timing}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--factor", type=float, default=3.0)
    parser.add_argument("--deadline-ms", type=float, default=50.0)
    add_window_args(parser)
    opts = parser.parse_args()
    configs = {
        "unary, router shedding on": (True, False),
        "unary, router shedding off": (False, False),
        "streams, router shedding on": (True, True),
    }
    results = {label: run_config(label, shed, stream, opts) for label, (shed, stream) in configs.items()}
    points = [p for ps in results.values() for p in ps]
    print()
    print(table(points))
    print()
    verdicts = [verdict(ps, opts.factor) for ps in results.values()]
    print("\n".join(verdicts))
    write_json(opts.out / "overload.json", "overload", points, {"verdicts": verdicts})


if __name__ == "__main__":
    main()
