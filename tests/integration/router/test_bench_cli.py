"""``ferryman bench`` against the real platform: closed loop (unary and streaming) and open loop."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from router_platform import E2E
from typer.testing import CliRunner

from ferryman_server.cli.main import app

# Left out of make test-fast: the load generator's windows.
pytestmark = pytest.mark.slow


def bench(e2e: E2E, *options: str) -> str:
    """Run ``ferryman bench echo`` against the platform with short windows; its output."""
    args = ["bench", "echo", "--input", '{"input": [[1, 2, 3, 4]]}', "--target", e2e.router]
    result = CliRunner().invoke(app, [*args, "--key", e2e.keys["acme"], "--warmup", "0.3", *options])
    assert result.exit_code == 0, result.output
    return str(result.output)


@pytest.mark.parametrize(
    "mode",
    [
        ["--concurrency", "4"],
        ["--concurrency", "2", "--stream"],
        ["--rate", "50"],
        ["--rate", "50", "--stream", "--concurrency", "2"],
    ],
)
def test_bench_measures_until_stable_and_writes_json(e2e: E2E, tmp_path: Path, mode: list[str]) -> None:
    out = tmp_path / "bench.json"
    bench(e2e, "--window", "0.4", "--max-windows", "4", "--json-out", str(out), *mode)
    summary = json.loads(out.read_text())
    assert summary["answered"] > 0 and summary["throughput_rps"] > 0 and summary["errors"] == {}
    assert summary["p50_ms"] <= summary["p99_ms"] and 1 <= len(summary["windows"]) <= 4


def test_bench_sweep_writes_every_run_and_a_latency_throughput_plot(e2e: E2E, tmp_path: Path) -> None:
    out, png = tmp_path / "sweep.json", tmp_path / "sweep.png"
    options = ["--window", "0.3", "--max-windows", "3", "--sweep", "1,4"]
    bench(e2e, *options, "--json-out", str(out), "--plot", str(png))
    runs = json.loads(out.read_text())["runs"]
    assert [r["concurrency"] for r in runs] == [1, 4]
    assert all(r["answered"] > 0 and r["errors"] == {} for r in runs)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
