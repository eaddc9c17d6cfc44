"""Adaptive batching window vs fixed windows (0, 2, 5, 10 ms) on ``mlp``.

One node process and one batcher process per configuration (fresh registry each
run), open-loop Poisson load at a light, a medium and an overload rate, every
request with a 50 ms deadline. Prints throughput, p99 and goodput (answers within
the deadline per second) per configuration and rate.

    python -m bench.scenarios.windows [--seconds 4] [--rates 100,500,1000,2000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc

from bench.loadgen import RunResult, make_inputs_factory, open_loop
from ferryman_server.gpu_node.demo import mlp
from ferryman_server.kernel.net import free_port
from ferryman_server.registry.db import make_engine
from ferryman_server.registry.migrate import upgrade
from ferryman_server.registry.reader import RegistryReader
from ferryman_server.registry.writer import RegistryWriter, VersionSpec

DEADLINE_S = 0.050
MAX_BATCH = 64
MAX_DELAY_MS = 10.0
WINDOWS: tuple[float | None, ...] = (None, 0.0, 2.0, 5.0, 10.0)
READY_TIMEOUT_S = 60.0


def start(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "ferryman_server.cli", *args],
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def wait_channel(address: str) -> None:
    with grpc.insecure_channel(address) as channel:
        grpc.channel_ready_future(channel).result(timeout=READY_TIMEOUT_S)


def wait_node(url: str) -> None:
    reader = RegistryReader(make_engine(url))
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not any(n.lifecycle == "READY" and "mlp:1" in n.loaded_versions for n in reader.nodes()):
        if time.monotonic() > deadline:
            raise TimeoutError("node never became ready")
        time.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rates", default="100,500,1000,2000", help="comma-separated offered requests/s")
    opts = parser.parse_args()
    rates = [float(r) for r in opts.rates.split(",")]
    rows: list[tuple[str, RunResult]] = []
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'registry.db'}"
        engine = make_engine(url)
        upgrade(engine)
        writer = RegistryWriter(engine, actor="bench")
        writer.register_version(
            VersionSpec(
                model="mlp",
                version="1",
                artifact=str(mlp.export_mlp(Path(tmp) / "mlp.pt2")),
                format="torch_export",
                io_schema=mlp.SCHEMA,
                max_batch_size=MAX_BATCH,
                max_queue_delay_ms=MAX_DELAY_MS,
            )
        )
        writer.place("mlp", "1")
        env = {
            "FERRYMAN_DATABASE_URL": url,
            "FERRYMAN_DATA_DIR": tmp,
            "FERRYMAN_NODE_TORCH_THREADS": "1",
            # One batch computes at a time on this 2-core machine; the batcher and the load
            # generator need the other core.
            "FERRYMAN_NODE_CAPACITY": "1",
            "FERRYMAN_LOG_LEVEL": "WARNING",
        }
        node = start(
            ["serve", "node", "--listen", f"127.0.0.1:{free_port()}", "--name", "bench", "--device", "cpu"],
            env,
        )
        try:
            wait_node(url)
            for window in WINDOWS:
                label = "adaptive" if window is None else f"fixed {window:g} ms"
                batcher_env = dict(env)
                if window is not None:
                    batcher_env["FERRYMAN_BATCHER_FIXED_WINDOW_S"] = str(window / 1000)
                address = f"127.0.0.1:{free_port()}"
                batcher = start(["serve", "batcher", "--listen", address], batcher_env)
                try:
                    wait_channel(address)
                    time.sleep(1.0)  # first registry refresh
                    for rate in rates:
                        run = asyncio.run(
                            open_loop(
                                address,
                                make_inputs_factory(),
                                model="mlp",
                                version="1",
                                rate=rate,
                                seconds=opts.seconds,
                                deadline_s=DEADLINE_S,
                            )
                        )
                        rows.append((label, run))
                        print(
                            f"{label:>14} rate {rate:>6.0f}/s: ok {run.throughput:7.1f}/s "
                            f"p99 {run.percentile(99) * 1000:6.1f} ms goodput {run.goodput:7.1f}/s "
                            f"errors {run.errors}",
                            flush=True,
                        )
                finally:
                    batcher.terminate()
                    batcher.wait(30)
        finally:
            node.terminate()
            node.wait(30)
    print()
    print(
        "| scheduler | offered req/s | answered req/s | p50 ms | p99 ms | goodput req/s (≤50 ms) | errors |"
    )
    print("|---|---:|---:|---:|---:|---:|---|")
    for label, run in rows:
        errors = ", ".join(f"{k} {v}" for k, v in sorted(run.errors.items())) or "-"
        print(
            f"| {label} | {run.rate:.0f} | {run.throughput:.0f} | {run.percentile(50) * 1000:.1f} "
            f"| {run.percentile(99) * 1000:.1f} | {run.goodput:.0f} | {errors} |"
        )


if __name__ == "__main__":
    main()
