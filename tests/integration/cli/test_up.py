"""The README's first command: ``ferryman up`` brings the platform up, its printed
snippet works as pasted, ``ferryman predict`` answers, and Ctrl-C stops everything."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import grpc
import pytest
from metrics_scrape import scrape

from ferryman_server.cli.bench.neighbors import ferryman_up
from ferryman_server.kernel.net import free_port

# Left out of make test-fast: ferryman up with every demo model.
pytestmark = pytest.mark.slow


def test_up_serves_the_demo_models_and_stops_cleanly(tmp_path: Path, smollm2_artifact: Path) -> None:
    # The session's converted SmolLM2, linked where up builds it: the conversion is ~25 s.
    shutil.copytree(smollm2_artifact, tmp_path / "models" / "smollm2-1", copy_function=os.link)
    router = f"127.0.0.1:{free_port()}"
    env = {**os.environ, "FERRYMAN_DATA_DIR": str(tmp_path), "FERRYMAN_LOG_LEVEL": "WARNING"}
    env.pop("FERRYMAN_DATABASE_URL", None)
    # Leaving the block sends Ctrl-C and requires exit code 0.
    with ferryman_up(tmp_path, router, generate=True) as info:
        assert info["router"] == router and info["api_key"].startswith("fm_")
        snippet = tmp_path / "snippet.py"
        snippet.write_text(info["snippet"])
        ran = subprocess.run(
            [sys.executable, str(snippet)], capture_output=True, text=True, timeout=60, env=env
        )
        assert ran.returncode == 0, ran.stderr
        assert "(1, 384)" in ran.stdout
        assert "smollm2" in info["snippet"]
        assert ran.stdout.split("(1, 384)")[1].strip(), "the snippet's chat printed its answer"
        predicted = subprocess.run(
            [
                sys.executable,
                "-m",
                "ferryman_server.cli",
                "predict",
                "minilm",
                "--input",
                '["hello"]',
                "--target",
                router,
                "--key",
                info["api_key"],
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert predicted.returncode == 0, predicted.stderr
        answer = json.loads(predicted.stdout)
        assert answer["version"] == "1" and len(answer["outputs"]["embedding"][0]) == 384
        curled = subprocess.run(["bash", "-c", info["curl"]], capture_output=True, text=True, timeout=60)
        assert curled.returncode == 0, curled.stderr
        assert len(json.loads(curled.stdout)["data"][0]["embedding"]) == 384, "the printed curl line works"
        assert info["http"] in info["curl"]
        assert set(info["metrics"]) == {"router", "batcher", "rollouts", "node-1"}
        addresses = info["addresses"]
        assert set(addresses) == {
            "router",
            "http",
            "quota_internal",
            "batcher",
            "rollouts",
            "console",
            "node-1",
        }
        assert addresses["router"] == router and "in the router's process" in addresses["batcher"]
        # Each one is listening: the node and the internal quota port take a connection.
        for name in ("node-1", "quota_internal", "rollouts", "console"):
            host, port = addresses[name].rsplit(":", 1)
            socket.create_connection((host, int(port)), timeout=5).close()
        assert "rollouts" in info["pids"]  # the rollout controller runs beside the router
        assert any(name == "process_cpu_seconds_total" for name, _ in scrape(info["metrics"]["rollouts"]))
        # Sized to this host: every core but the services' share for the one node's torch
        # threads; the batcher inside the router.
        assert info["tuning"]["batcher"] == "in the router process"
        assert "batcher" not in info["pids"]
        assert 1 <= info["tuning"]["node_torch_threads"] < max(2, info["tuning"]["cores"])
        with urllib.request.urlopen(f"{info['console_url']}/_stcore/health", timeout=5) as health:
            assert health.status == 200
        assert len(info["console_password"]) >= 12
        router_metrics = scrape(info["metrics"]["router"])
        ok = sum(
            v
            for (name, labels), v in router_metrics.items()
            if name == "ferryman_requests_total" and ("code", "OK") in labels
        )
        assert ok >= 4  # the snippet's two requests, the CLI's one and curl's
        node_batches = sum(
            v
            for (name, _), v in scrape(info["metrics"]["node-1"]).items()
            if name == "ferryman_node_batches_total"
        )
        assert node_batches >= 1
        assert scrape(info["metrics"]["node-1"])[("ferryman_node_up", ())] == 1
    with grpc.insecure_channel(router) as channel:
        try:
            grpc.channel_ready_future(channel).result(timeout=1)
            stopped = False
        except grpc.FutureTimeoutError:
            stopped = True
    assert stopped, "the router still answers after Ctrl-C"


def test_a_port_in_use_is_a_one_line_error(tmp_path: Path) -> None:
    env = {**os.environ, "FERRYMAN_DATA_DIR": str(tmp_path)}
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = f"127.0.0.1:{holder.getsockname()[1]}"
        for command in (["up", "--nodes", "1", "--listen", taken], ["serve", "router", "--listen", taken]):
            ran = subprocess.run(
                [sys.executable, "-m", "ferryman_server.cli", *command],
                capture_output=True,
                text=True,
                timeout=120,
                env=env,
            )
            assert ran.returncode == 1, command
            assert f"error: cannot listen on {taken}: the address is in use" in ran.stderr
            assert "Traceback" not in ran.stderr
