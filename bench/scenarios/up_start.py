"""How long ``ferryman up`` takes to be ready, and the memory it then holds, as a user sees it.

Runs ``ferryman up --nodes N --json`` in a fresh data directory: the first start builds the
demo artifacts (SmolLM2's GGUF conversion among them), later ones reuse them (warm). Ready
is the JSON line ``up`` prints once every service answers; memory is the resident set of
``up`` and every process under it at that moment (and ``up``'s own apart), and CPU the
seconds each had used by then: on a loaded or slower machine the wall time moves with
the load, the CPU a start costs much less.

    python -m bench.scenarios.up_start [--nodes 1] [--runs 3] [--no-generate]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from bench.scenarios.measure import kill_pids, machine, tree_pids
from ferryman_server.kernel.net import free_port

STOP_TIMEOUT_S = 60.0
MIB = 2**20


@dataclass(frozen=True)
class Start:
    seconds: float
    rss_mib: float
    up_rss_mib: float
    cpu_s: float
    processes: dict[str, tuple[float, float]]
    """Each process by its role: (resident MiB, CPU seconds used)."""


def usage_by_process(root: psutil.Process) -> dict[str, tuple[float, float]]:
    """Resident MiB and CPU seconds of ``root`` and each descendant, named by its role."""
    usage: dict[str, tuple[float, float]] = {}
    for proc in [root, *root.children(recursive=True)]:
        try:
            args = proc.cmdline()
            rss = proc.memory_info().rss / MIB
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        name = "up" if proc.pid == root.pid else " ".join(a for a in args[2:6] if not a.startswith("-"))
        usage[f"{name} ({proc.pid})"] = (rss, times.user + times.system)
    return usage


def start_once(data_dir: Path, nodes: int, generate: bool) -> Start:
    env = {**os.environ, "FERRYMAN_DATA_DIR": str(data_dir), "FERRYMAN_LOG_LEVEL": "WARNING"}
    args = [sys.executable, "-m", "ferryman_server.cli", "up", "--nodes", str(nodes), "--json"]
    args += ["--listen", f"127.0.0.1:{free_port()}", "--http-listen", f"127.0.0.1:{free_port()}"]
    args += [] if generate else ["--no-generate"]
    began = time.perf_counter()
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        # up prints one JSON line once everything answers (or exits when it gives up waiting).
        line = proc.stdout.readline()
        seconds = time.perf_counter() - began
        if not line.startswith("{"):
            raise RuntimeError(f"ferryman up did not get ready (exit {proc.poll()})")
        usage = usage_by_process(psutil.Process(proc.pid))
        up_rss = next(rss for k, (rss, _) in usage.items() if k.startswith("up "))
        rss_mib, cpu_s = (sum(column) for column in zip(*usage.values(), strict=True))
        return Start(seconds, rss_mib, up_rss, cpu_s, usage)
    finally:
        pids = tree_pids([proc.pid])
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        kill_pids(pids)  # anything up left behind


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--runs", type=int, default=3, help="warm starts after the first")
    parser.add_argument("--no-generate", dest="generate", action="store_false")
    opts = parser.parse_args()
    print(f"machine: {machine()}")
    with tempfile.TemporaryDirectory(prefix="ferryman-up-") as tmp:
        data_dir = Path(tmp)
        for run in range(opts.runs + 1):
            start = start_once(data_dir, opts.nodes, opts.generate)
            kind = "first" if run == 0 else "warm"
            print(
                f"{kind}: ready in {start.seconds:.1f} s, {start.rss_mib:.0f} MiB resident in all "
                f"(up itself {start.up_rss_mib:.0f} MiB), {start.cpu_s:.1f} CPU-s in all",
                flush=True,
            )
            for name, (rss, cpu) in sorted(start.processes.items(), key=lambda item: -item[1][0]):
                print(f"    {rss:7.0f} MiB  {cpu:5.1f} CPU-s  {name}")


if __name__ == "__main__":
    main()
