"""A real Prometheus (Debian's package) scraping given targets, for tests that read what
dashboards and controllers read. Started on a free port, stopped by PID."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from ferryman_server.kernel.net import free_port

READY_TIMEOUT_S = 30.0
SCRAPE_INTERVAL_S = 0.5
"""Prometheus durations take whole milliseconds: written as such."""


def _all_up(url: str, count: int) -> bool:
    with urllib.request.urlopen(f"{url}/api/v1/targets", timeout=5) as response:
        active = json.loads(response.read())["data"]["activeTargets"]
    return len(active) == count and all(t["health"] == "up" for t in active)


@contextmanager
def run_prometheus(root: Path, targets: list[str], rule_files: Sequence[Path] = ()) -> Iterator[str]:
    """Prometheus scraping ``targets`` (host:port of /metrics endpoints) and evaluating
    ``rule_files`` every scrape interval; yields its URL."""
    binary = shutil.which("prometheus")
    assert binary, "Debian's prometheus package is required (.ci/run installs it)"
    root.mkdir(parents=True, exist_ok=True)
    config = root / "prometheus.yml"
    quoted = ", ".join(f"'{t}'" for t in targets)
    config.write_text(
        "global:\n"
        f"  scrape_interval: {int(SCRAPE_INTERVAL_S * 1000)}ms\n"
        f"  evaluation_interval: {int(SCRAPE_INTERVAL_S * 1000)}ms\n"
        + (f"rule_files: [{', '.join(repr(str(r)) for r in rule_files)}]\n" if rule_files else "")
        + "scrape_configs:\n"
        "  - job_name: ferryman\n"
        f"    static_configs: [{{targets: [{quoted}]}}]\n"
    )
    address = f"127.0.0.1:{free_port()}"
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={root / 'data'}",
            f"--web.listen-address={address}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://{address}"
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as ready:
                    if ready.status == 200:
                        break
            except OSError:
                pass
            assert process.poll() is None, "prometheus exited"
            assert time.monotonic() < deadline, "prometheus never became ready"
            time.sleep(0.2)
        # Prometheus applies discovered targets every 5 s: wait for every one's first scrape.
        while not _all_up(url, len(targets)):
            assert time.monotonic() < deadline + READY_TIMEOUT_S, "prometheus never scraped its targets"
            time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
