"""Overload with a native load generator: ``mlp`` offered its capacity, then 2x and 3x, in
open loop, every request with a 50 ms deadline, driven by h2load (Debian's nghttp2-client).

On two cores a Python load generator at 3x capacity takes a core by itself and decides the
result; h2load is C and its CPU is measured and printed beside the router's. h2load speaks
HTTP/2 and sends gRPC frames as POST bodies, but cannot read gRPC statuses (they come in
trailers), so outcomes are counted from the router's own metrics: answers within the deadline
(the latency histogram's 50 ms bucket, code OK), refusals at the door (the adaptive
concurrency limit) and further in (shedding, deadlines). Every request carries the same input,
so the platform runs with coalescing off (each one computes). A Python probe at 20 requests/s
beside the load times its own answers and refusals by outcome. The bare grpc.aio echo server
(``limit_ref --echo``) is driven the same way in the same run: the router's CPU per request
is compared with the echo server's CPU per call.

With ``--sdk-processes N`` the overload phases (2x and 3x) are offered by users of the SDK
instead (``bench.scenarios.sdk_users``: N processes, each an asyncio loop of ``AsyncClient``
calls with the SDK's retries and adaptive throttling, ``--no-throttle`` to turn it off), and
goodput is what those users saw answered within the deadline; capacity is still found with
h2load.

    python -m bench.scenarios.overload_native [--seconds 10] [--deadline-ms 50] [--no-limit]
        [--workers N] [--max-calls N] [--max-streams N] [--sdk-processes N [--no-throttle]]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
import resource
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import ferryman
from bench.scenarios.limit_ref import limit_reference
from bench.scenarios.measure import cpu_seconds, machine, tree_pids
from bench.scenarios.platform import PlatformSpec
from bench.scenarios.platform import ferryman as ferryman_platform
from ferryman.tensors import encode
from ferryman.v1 import common_pb2, inference_pb2
from ferryman_server.kernel.net import free_port, free_ports
from ferryman_server.kernel.scrape import Samples, scrape

CLOSED_CLIENTS, CLOSED_STREAMS = 4, 16
"""Capacity: 64 requests in flight (4 connections x 16 streams), as the closed-loop scenarios."""
OPEN_CLIENTS = 8
MAX_STREAMS = 1024
"""Open loop: streams per connection never hold back the offered rate."""
SEARCH_FRACTIONS = (0.3, 0.5, 0.7, 0.9)
"""Open-loop rates tried for capacity, as fractions of the closed-loop throughput."""
OVERLOAD_FACTORS = (2.0, 3.0)
"""Offered load after capacity, as multiples of the capacity's rate."""
PROBE_RATE = 20.0
CLOSED_TIMEOUT_MS = 5000
DONE = re.compile(r"requests: (\d+) total, (\d+) started, (\d+) done")


@dataclass
class Driven:
    requests: int
    generator_cpu_s: float
    probe: dict[str, list[float]] = field(default_factory=dict)
    """The probe's latencies (ms) by outcome."""
    users: dict[str, int] = field(default_factory=dict)
    """SDK users' outcomes (``sdk_users``): ``good``, ``late`` and errors by code."""


def grpc_body(request: inference_pb2.PredictRequest) -> bytes:
    """One gRPC message as an HTTP/2 body: no compression flag, 4-byte length, the message."""
    data = request.SerializeToString()
    return b"\0" + len(data).to_bytes(4, "big") + data


def h2load_args(
    address: str,
    key: str,
    body: Path,
    seconds: float,
    deadline_ms: int,
    rate: float,
    connections: int = CLOSED_CLIENTS,
) -> list[str]:
    """h2load's command line: open loop at ``rate`` per second, or closed loop with 64 in
    flight over ``connections`` connections (rate 0)."""
    args = ["h2load", "-D", str(math.ceil(seconds)), "-d", str(body)]
    args += ["-H", "content-type: application/grpc", "-H", "te: trailers"]
    args += ["-H", f"authorization: Bearer {key}", "-H", f"grpc-timeout: {deadline_ms}m"]
    if rate:
        args += ["-c", str(OPEN_CLIENTS), "-m", str(MAX_STREAMS), "--rps", f"{rate / OPEN_CLIENTS:.1f}"]
    else:
        args += ["-c", str(connections), "-m", str(CLOSED_CLIENTS * CLOSED_STREAMS // connections)]
    return [*args, f"http://{address}/ferryman.v1.Inference/Predict"]


async def probe(address: str, key: str, seconds: float, deadline_s: float) -> dict[str, list[float]]:
    """Low-rate requests beside the load: each one's latency (ms), by outcome."""
    latencies: dict[str, list[float]] = {}
    x = np.zeros((1, 512), np.float32)
    async with ferryman.AsyncClient(address, key, retries=0, throttle=False) as client:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            started = time.perf_counter()
            try:
                await client.predict("mlp", {"input": x}, timeout=deadline_s)
                outcome = "OK"
            except ferryman.FerrymanError as exc:
                outcome = exc.code.name
            latencies.setdefault(outcome, []).append((time.perf_counter() - started) * 1000)
            await asyncio.sleep(1 / PROBE_RATE)
    return latencies


async def drive(
    args: list[str], probe_at: tuple[str, str] | None, seconds: float, deadline_s: float
) -> Driven:
    """h2load with ``args`` to its end, and the probe beside it; h2load's CPU from rusage."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = await asyncio.create_subprocess_exec(*args, stdout=asyncio.subprocess.PIPE)
    probed = await probe(*probe_at, seconds, deadline_s) if probe_at else {}
    out, _ = await proc.communicate()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    found = DONE.search(out.decode())
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Driven(int(found.group(3)) if found else 0, cpu, probed)


async def drive_sdk(
    address: str, key: str, rate: float, opts: argparse.Namespace, deadline_s: float
) -> Driven:
    """``opts.sdk_processes`` processes of SDK users sharing ``rate``, to their end, and the
    probe beside them; the users' CPU from rusage."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    args = ["--target", address, "--key", key, "--rate", f"{rate / opts.sdk_processes:.1f}"]
    args += ["--seconds", str(opts.seconds), "--deadline-ms", str(opts.deadline_ms)]
    args += [] if opts.throttle else ["--no-throttle"]
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.scenarios.sdk_users", *args, stdout=asyncio.subprocess.PIPE
        )
        for _ in range(opts.sdk_processes)
    ]
    probed = await probe(address, key, opts.seconds, deadline_s)
    users: dict[str, int] = {}
    for proc in procs:
        out, _ = await proc.communicate()
        for outcome, n in json.loads(out.decode() or "{}").items():
            users[outcome] = users.get(outcome, 0) + n
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Driven(sum(users.values()), cpu, probed, users)


def delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    want = set(labels.items())
    return sum(v - before.get(k, 0.0) for k, v in after.items() if k[0] == name and want <= set(k[1]))


def p99(values: list[float]) -> float:
    return float(np.percentile(values, 99)) if values else float("nan")


class Phase:
    """One platform, driven phase after phase; each phase's outcomes from the router's metrics."""

    def __init__(
        self,
        address: str,
        key: str,
        body: Path,
        urls: list[str],
        routers: list[int],
        opts: argparse.Namespace,
    ) -> None:
        self._address, self._key, self._body, self._urls, self._routers = address, key, body, urls, routers
        self._opts = opts

    def run(self, label: str, rate: float, sdk: bool = False) -> dict[str, Any]:
        """Closed loop (``rate`` 0, a long timeout) or open loop at ``rate`` with the deadline,
        from h2load or (``sdk``) from SDK users."""
        opts = self._opts
        deadline_s = opts.deadline_ms / 1000
        timeout_ms = opts.deadline_ms if rate else CLOSED_TIMEOUT_MS
        args = h2load_args(self._address, self._key, self._body, opts.seconds, timeout_ms, rate)
        before, cpu_before, started = scrape(self._urls), cpu_seconds(self._routers), time.monotonic()
        probe_at = (self._address, self._key) if rate else None
        if rate and sdk:
            driven = asyncio.run(drive_sdk(self._address, self._key, rate, opts, deadline_s))
        else:
            driven = asyncio.run(drive(args, probe_at, opts.seconds, deadline_s))
        elapsed = time.monotonic() - started
        after, router_cpu = scrape(self._urls), cpu_seconds(self._routers) - cpu_before

        def per_s(name: str, **labels: str) -> float:
            return delta(before, after, name, **labels) / elapsed

        sent = driven.requests / elapsed
        outcomes = {
            "ok_per_s": per_s("ferryman_requests_total", code="OK"),
            "refused_at_door_per_s": per_s("ferryman_router_limited_total"),
            "stale_per_s": per_s("ferryman_router_stale_total"),
            "shed_per_s": per_s("ferryman_requests_total", code="RESOURCE_EXHAUSTED"),
            "late_per_s": per_s("ferryman_requests_total", code="DEADLINE_EXCEEDED"),
        }
        good = per_s("ferryman_request_latency_seconds_bucket", code="OK", le=str(deadline_s))
        if driven.users:
            # The users' own count: an answer after a retry is good only within their deadline.
            good = driven.users.get("good", 0) / elapsed
        row: dict[str, Any] = {
            "load": label,
            "offered_per_s": round(rate or sent),
            "sent_per_s": round(sent),
            "good_per_s": round(good),
            **{k: round(v) for k, v in outcomes.items()},
            # Answered by gRPC itself (the deadline passed before the router read them).
            "unseen_per_s": round(max(0.0, sent - sum(outcomes.values()))),
            "router_cpu_us_per_request": round(router_cpu / max(1, driven.requests) * 1e6),
            "h2load_cpu_us_per_request": round(driven.generator_cpu_s / max(1, driven.requests) * 1e6),
            "probe_p99_ms": {k: round(p99(v), 1) for k, v in driven.probe.items()},
            "probe_counts": {k: len(v) for k, v in driven.probe.items()},
            "sdk_users": driven.users,
        }
        print(json.dumps(row), flush=True)
        return row


def summary(rows: list[dict[str, Any]], capacity: float) -> str:
    """A markdown table of the phases; goodput as a share of goodput at capacity."""
    lines = [
        "| load | offered/s | good/s (of capacity) | door/s | stale/s | shed/s | late/s | unseen/s "
        "| router us/req | h2load us/req | probe p99 ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        probes = ", ".join(f"{k} {v}" for k, v in r["probe_p99_ms"].items()) or "-"
        share = r["good_per_s"] / max(1.0, capacity)
        lines.append(
            f"| {r['load']} | {r['offered_per_s']:,} | {r['good_per_s']:,} ({share:.2f}) "
            f"| {r['refused_at_door_per_s']:,} | {r['stale_per_s']:,} | {r['shed_per_s']:,} "
            f"| {r['late_per_s']:,} | {r['unseen_per_s']:,} | {r['router_cpu_us_per_request']} "
            f"| {r['h2load_cpu_us_per_request']} | {probes} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--deadline-ms", type=int, default=50)
    parser.add_argument("--no-limit", action="store_true", help="the router's adaptive limit off")
    parser.add_argument("--workers", type=int, default=1, help="router processes on the port")
    parser.add_argument("--max-calls", type=int, default=0, help="FERRYMAN_ROUTER_MAX_CALLS (0: none)")
    parser.add_argument(
        "--max-streams", type=int, default=0, help="FERRYMAN_ROUTER_MAX_STREAMS_PER_CONNECTION (0: none)"
    )
    parser.add_argument(
        "--sdk-processes", type=int, default=0, help="overload from SDK users in N processes (0: h2load)"
    )
    parser.add_argument("--no-throttle", dest="throttle", action="store_false", help="SDK users unthrottled")
    parser.add_argument("--out", type=Path, default=Path("docs/bench"))
    opts = parser.parse_args()
    deadline_s = opts.deadline_ms / 1000
    x = np.random.default_rng(0).standard_normal((1, 512), dtype=np.float32)
    request = inference_pb2.PredictRequest(
        model="mlp", inputs=[common_pb2.NamedTensor(name="input", tensor=encode(x))]
    )
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        body = Path(tmp) / "request.bin"
        body.write_bytes(grpc_body(request))
        with limit_reference(port := free_port(), echo=True) as echo_pid:
            cpu_before = cpu_seconds([echo_pid])
            args = h2load_args(f"127.0.0.1:{port}", "unused", body, opts.seconds, CLOSED_TIMEOUT_MS, 0.0)
            echo = asyncio.run(drive(args, None, opts.seconds, deadline_s))
            echo_us = (cpu_seconds([echo_pid]) - cpu_before) / max(1, echo.requests) * 1e6
        print(f"bare echo: {echo.requests / opts.seconds:,.0f} calls/s, server {echo_us:.0f} us CPU per call")
        metrics_port = free_ports(opts.workers)  # worker i serves its metrics on the port + i
        env = {
            "FERRYMAN_BATCHER_COALESCE": "false",
            "FERRYMAN_ROUTER_METRICS_LISTEN": f"127.0.0.1:{metrics_port}",
        }
        if opts.max_calls:
            env["FERRYMAN_ROUTER_MAX_CALLS"] = str(opts.max_calls)
        if opts.max_streams:
            env["FERRYMAN_ROUTER_MAX_STREAMS_PER_CONNECTION"] = str(opts.max_streams)
        if opts.no_limit:
            env["FERRYMAN_ROUTER_ADAPTIVE_LIMIT"] = "false"
        urls = [f"http://127.0.0.1:{metrics_port + i}/metrics" for i in range(opts.workers)]
        with ferryman_platform(PlatformSpec(env=env, workers=opts.workers)) as platform:
            at = Phase(platform.address, platform.key, body, urls, tree_pids([platform.router_pid]), opts)
            closed = at.run("capacity: closed loop, 64 in flight", 0.0)
            rows.append(closed)
            # Capacity: the open-loop rate with the most answers within the deadline.
            search = [at.run(f"{f:g}x closed loop", f * closed["ok_per_s"]) for f in SEARCH_FRACTIONS]
            best = max(search, key=lambda r: r["good_per_s"])
            rows += search
            sdk = opts.sdk_processes > 0
            by = f", SDK users{'' if opts.throttle else ' without throttling'}" if sdk else ""
            for factor in OVERLOAD_FACTORS:
                rows.append(at.run(f"{factor:g}x capacity{by}", factor * best["offered_per_s"], sdk))
            capacity = best["good_per_s"]
    print(f"\nbare echo server: {echo_us:.0f} us CPU per call\n")
    print(summary(rows, capacity))
    record = {
        "scenario": "overload_native",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": machine(),
        "echo_us_per_call": round(echo_us),
        "adaptive_limit": not opts.no_limit,
        "workers": opts.workers,
        "max_calls": opts.max_calls,
        "max_streams": opts.max_streams,
        "sdk_processes": opts.sdk_processes,
        "sdk_throttle": opts.throttle,
        "capacity_good_per_s": capacity,
        "rows": rows,
    }
    calls = f"_calls{opts.max_calls}" if opts.max_calls else ""
    sdk = f"_sdk{opts.sdk_processes}{'' if opts.throttle else 'nothrottle'}" if opts.sdk_processes else ""
    streams = f"_streams{opts.max_streams}" if opts.max_streams else ""
    name = f"overload_native{'_nolimit' if opts.no_limit else ''}_w{opts.workers}{calls}{streams}{sdk}.json"
    opts.out.mkdir(parents=True, exist_ok=True)
    (opts.out / name).write_text(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
