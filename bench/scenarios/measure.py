"""One measured point: ``ferryman_server.cli.bench.loadgen`` against a target, plus the CPU
its processes spent.

Shared by every scenario, for Ferryman and for the peer alike, so both sides are driven and
accounted the same way: CPU is summed over the serving processes (and their children), not
the load generator, across exactly the windows the summary covers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import psutil

from ferryman_server.cli.bench.loadgen import InputsFactory, LoadSpec, run
from ferryman_server.cli.bench.stats import Window, stable, summarize


def tree_pids(roots: Iterable[int]) -> list[int]:
    """The given processes and all their descendants that are alive now."""
    pids: list[int] = []
    for root in roots:
        with suppress(psutil.NoSuchProcess):
            pids += [root, *(p.pid for p in psutil.Process(root).children(recursive=True))]
    return pids


def kill_pids(pids: Iterable[int]) -> None:
    """SIGKILL whatever of ``pids`` is still running (leftovers after a clean stop)."""
    for pid in pids:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def cpu_seconds(pids: Iterable[int]) -> float:
    """User + system CPU seconds the processes have used so far (gone ones count 0)."""
    total = 0.0
    for pid in pids:
        with suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            times = psutil.Process(pid).cpu_times()
            total += times.user + times.system
    return total


@dataclass(frozen=True)
class Point:
    """A row of a results table."""

    system: str
    label: str
    concurrency: int
    rate: float
    stable: bool
    summary: dict[str, Any]
    cpu_ms_per_request: float


def measure(
    system: str, label: str, spec: LoadSpec, make_inputs: InputsFactory, roots: Sequence[int]
) -> Point:
    """Run the load generator once; CPU per answered request over the summarised windows."""
    pids = tree_pids(roots)
    samples: list[float] = []

    def on_window(_: Window) -> None:
        samples.append(cpu_seconds(pids))

    def on_start() -> None:
        samples.append(cpu_seconds(pids))

    windows = asyncio.run(run(spec, make_inputs, on_window, on_start))
    used = windows[-3:] if stable(windows) else windows
    summary = summarize(used)
    cpu = samples[-1] - samples[-1 - len(used)]
    answered = int(summary["answered"])  # type: ignore[call-overload]
    return Point(
        system=system,
        label=label,
        concurrency=spec.concurrency,
        rate=spec.rate,
        stable=stable(windows),
        summary=summary,
        cpu_ms_per_request=cpu * 1000 / answered if answered else float("nan"),
    )


CLOSED_DEADLINE_S = 5.0
"""Closed loop: a generous deadline, so latency (not refusals) is what is compared."""


class Target(Protocol):
    """Something to load: an Inference endpoint, its key, and the processes serving it."""

    @property
    def address(self) -> str: ...
    @property
    def key(self) -> str: ...
    @property
    def pids(self) -> list[int]: ...


@dataclass(frozen=True)
class Endpoint:
    """A Target given by hand (the peer)."""

    address: str
    key: str
    pids: list[int]


def add_window_args(parser: argparse.ArgumentParser) -> None:
    """The measurement options every scenario takes."""
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds before measuring")
    parser.add_argument("--window", type=float, default=4.0, help="seconds per window")
    parser.add_argument("--max-windows", type=int, default=6)
    parser.add_argument("--out", type=Path, default=Path("docs/bench"), help="where JSON/PNG go")


def scenario_options(
    doc: str | None, levels: str, configure: Callable[[argparse.ArgumentParser], None] | None = None
) -> tuple[argparse.Namespace, list[int]]:
    """Parse a closed-loop scenario's command line: --levels, the window options, and any
    extra options ``configure`` adds. Returns the options and the concurrency levels."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", default=levels, help="comma-separated concurrencies")
    add_window_args(parser)
    if configure is not None:
        configure(parser)
    opts = parser.parse_args()
    return opts, [int(c) for c in opts.levels.split(",")]


def load_spec(target: Target, model: str, opts: argparse.Namespace, **kw: Any) -> LoadSpec:
    """A LoadSpec for ``target`` with the scenario's window options."""
    return LoadSpec(
        target=target.address,
        api_key=target.key,
        model=model,
        warmup_s=opts.warmup,
        window_s=opts.window,
        max_windows=opts.max_windows,
        **kw,
    )


def closed_sweep(
    system: str,
    target: Target,
    model: str,
    levels: Sequence[int],
    make_inputs: InputsFactory,
    opts: argparse.Namespace,
    stream: bool = False,
) -> list[Point]:
    """One closed-loop point per concurrency level, each printed as it lands."""
    points = []
    for c in levels:
        spec = load_spec(target, model, opts, concurrency=c, stream=stream, deadline_s=CLOSED_DEADLINE_S)
        point = measure(system, f"c={c}", spec, make_inputs, target.pids)
        print(table([point]).splitlines()[-1], flush=True)
        points.append(point)
    return points


def machine() -> str:
    """A one-line description of this machine for result tables."""
    return (
        f"{os.cpu_count()} vCPU {platform.machine()}, "
        f"{psutil.virtual_memory().total / 2**30:.0f} GiB, Python {platform.python_version()}"
    )


def write_json(
    path: Path, scenario: str, points: Sequence[Point], extra: dict[str, Any] | None = None
) -> None:
    """All points of a scenario with the date and machine."""
    record = {
        "scenario": scenario,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": machine(),
        "points": [asdict(p) for p in points],
        **(extra or {}),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2))


def fmt_ms(value: Any) -> str:
    return f"{float(value):.1f}"


def table(points: Sequence[Point]) -> str:
    """A markdown table of the points."""
    lines = [
        "| system | load | req/s | goodput/s | p50 ms | p99 ms | CPU ms/req | errors |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for p in points:
        s = p.summary
        errors = ", ".join(f"{k} {v}" for k, v in sorted(s["errors"].items())) or "-"
        lines.append(
            f"| {p.system} | {p.label} | {s['throughput_rps']:,.0f} | {s['goodput_rps']:,.0f} "
            f"| {fmt_ms(s['p50_ms'])} | {fmt_ms(s['p99_ms'])} | {p.cpu_ms_per_request:.2f} | {errors} |"
        )
    return "\n".join(lines)
