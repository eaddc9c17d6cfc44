"""Shadow traffic's cost to tenants: the same mlp load with the route mirroring ``--percent``
of its requests to a second version (the same weights) and without, in turns (off, on, off,
on) within one run, so the machine's drift shows as the spread between the two "off" runs.
Two loads: closed loop at ``--levels`` (the node saturated: shadows must shed) and open
loop at ``--rate`` (Poisson arrivals leaving the node spare capacity, which shadows use).
The load generator runs in this process with the same load in every phase, so it takes the
same share of the two cores throughout; what changes between phases is only the shadow work
the platform takes on.

    python -m bench.scenarios.shadow [--levels 8] [--rate 100] [--percent 50]
"""

from __future__ import annotations

import argparse
import time

from bench.loadgen import make_inputs_factory
from bench.scenarios.measure import (
    CLOSED_DEADLINE_S,
    Point,
    closed_sweep,
    load_spec,
    measure,
    scenario_options,
    table,
    write_json,
)
from bench.scenarios.platform import PlatformSpec, Running, ferryman
from ferryman_server.cli.bench.loadgen import LoadSpec
from ferryman_server.kernel.net import free_port
from ferryman_server.kernel.scrape import Samples, scrape
from ferryman_server.registry.db import make_engine
from ferryman_server.registry.reader import RegistryReader
from ferryman_server.registry.writer import RegistryWriter, VersionSpec

SHADOW = "2"
LOAD_TIMEOUT_S = 120.0
SETTLE_S = 2.0
"""After a route change: every router's next registry refresh, with margin."""
PHASES = ("off", "on", "off", "on")


def add_copy(url: str) -> None:
    """mlp version 2, the same weights as 1, placed on every node; returns once loaded."""
    engine = make_engine(url)
    writer, reader = RegistryWriter(engine, actor="bench"), RegistryReader(engine)
    (one,) = [v for v in reader.versions("mlp") if v.version == "1"]
    writer.register_version(
        VersionSpec(
            model="mlp",
            version=SHADOW,
            artifact=one.artifact_uri,
            format=one.format,
            io_schema=one.io_schema,
            sha256=one.sha256,
            max_batch_size=one.max_batch_size,
            max_queue_delay_ms=one.max_queue_delay_ms,
            published=True,
        )
    )
    writer.place("mlp", SHADOW)
    deadline = time.monotonic() + LOAD_TIMEOUT_S
    while not all(f"mlp:{SHADOW}" in n.loaded_versions for n in reader.nodes() if n.lifecycle == "READY"):
        if time.monotonic() > deadline:
            raise TimeoutError("mlp:2 never loaded")
        time.sleep(0.5)
    engine.dispose()


def shadow_counts(before: Samples, after: Samples) -> dict[str, float]:
    """Shadowed requests by result, and skipped ones, between two scrapes."""
    out: dict[str, float] = {}
    for key, value in after.items():
        name, labels = key
        if name == "ferryman_shadow_compared_total":
            result = dict(labels)["result"]
            out[result] = out.get(result, 0.0) + value - before.get(key, 0.0)
        elif name == "ferryman_shadow_skipped_total":
            out["skipped"] = out.get("skipped", 0.0) + value - before.get(key, 0.0)
    return out


def load_spec_for(platform: Running, opts: argparse.Namespace) -> LoadSpec:
    """Open loop at ``opts.rate`` with a generous deadline (latency is compared, not refusals)."""
    return load_spec(platform, "mlp", opts, rate=opts.rate, concurrency=1, deadline_s=CLOSED_DEADLINE_S)


def main() -> None:
    def percent_option(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--percent", type=int, default=50, help="share of requests mirrored")
        parser.add_argument("--rate", type=float, default=100.0, help="open-loop arrivals per second")

    opts, levels = scenario_options(__doc__, "8", percent_option)
    metrics = f"127.0.0.1:{free_port()}"
    spec = PlatformSpec(env={"FERRYMAN_ROUTER_METRICS_LISTEN": metrics})
    inputs = make_inputs_factory()
    points: list[Point] = []
    mirrored: list[dict[str, float]] = []
    with ferryman(spec) as platform:
        add_copy(platform.registry_url)
        engine = make_engine(platform.registry_url)
        writer = RegistryWriter(engine, actor="bench")
        for load in (f"c={levels[0]}", f"rate={opts.rate:g}"):
            for i, phase in enumerate(PHASES):
                percent = opts.percent if phase == "on" else 0
                writer.set_shadow("mlp", SHADOW if percent else "", percent)
                time.sleep(SETTLE_S)
                before = scrape([f"http://{metrics}/metrics"])
                system = f"{load} shadow-{phase}-{i + 1}"
                if load.startswith("c="):
                    points += closed_sweep(system, platform, "mlp", levels[:1], inputs, opts)
                else:
                    load_spec = load_spec_for(platform, opts)
                    points.append(measure(system, load, load_spec, inputs, platform.pids))
                mirrored.append(shadow_counts(before, scrape([f"http://{metrics}/metrics"])))
        engine.dispose()
    print()
    print(table(points))
    print()
    for point, counts in zip(points, mirrored, strict=True):
        print(point.system, {k: int(v) for k, v in sorted(counts.items())})
    for load in sorted({p.label for p in points}):
        off = [p for p in points if p.label == load and "-off-" in p.system]
        on = [p for p in points if p.label == load and "-on-" in p.system]
        print(f"\n{load}:")
        for figure in ("throughput_rps", "p50_ms", "p99_ms"):
            base = sum(float(p.summary[figure]) for p in off) / len(off)
            with_shadow = sum(float(p.summary[figure]) for p in on) / len(on)
            spread = abs(float(off[0].summary[figure]) - float(off[1].summary[figure])) / base
            ratio = with_shadow / base
            print(
                f"  {figure}: with shadow / without = {ratio:.3f} (the runs without differ by {spread:.1%})"
            )
    write_json(opts.out / "shadow.json", "shadow", points)
    print(f"\nwrote {opts.out / 'shadow.json'}")


if __name__ == "__main__":
    main()
