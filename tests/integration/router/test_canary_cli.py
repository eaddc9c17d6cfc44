"""``ferryman canary`` over the end-to-end platform (real gRPC, real models): a version that
answers like its baseline passes; one that takes 300 ms per batch fails on latency, with
the numbers; both judged from the router's own metrics over one window."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from typing import Any

import grpc
import numpy as np
import pytest
from router_platform import E2E

from ferryman.tensors import encode
from ferryman.v1 import common_pb2, inference_pb2, inference_pb2_grpc
from ferryman_server.gpu_node.demo import echo

# Left out of make test-fast: ferryman canary processes.
pytestmark = pytest.mark.slow

WINDOW_S = 4.0
SENDERS = 8


def traffic(
    e2e: E2E, model: str, versions: tuple[str, str], width: int, stop: threading.Event
) -> list[threading.Thread]:
    """Closed-loop requests pinned to each of ``versions``, SENDERS at a time, until ``stop``."""
    stub = inference_pb2_grpc.InferenceStub(grpc.insecure_channel(e2e.router))
    metadata = [("authorization", f"Bearer {e2e.keys['acme']}")]

    def send(version: str, seed: int) -> None:
        rng = np.random.default_rng(seed)
        while not stop.is_set():
            x = rng.standard_normal((1, width), dtype=np.float32)  # distinct: nothing coalesces
            request = inference_pb2.PredictRequest(
                model=model, version=version, inputs=[common_pb2.NamedTensor(name="input", tensor=encode(x))]
            )
            stub.Predict(request, metadata=metadata, timeout=30)

    threads = [
        threading.Thread(target=send, args=(v, i * 2 + j), daemon=True)
        for i in range(SENDERS // 2)
        for j, v in enumerate(versions)
    ]
    for t in threads:
        t.start()
    return threads


def judged(e2e: E2E, model: str, baseline: str, canary: str, width: int) -> tuple[int, dict[str, Any]]:
    stop = threading.Event()
    senders = traffic(e2e, model, (baseline, canary), width, stop)
    try:
        command = [sys.executable, "-m", "ferryman_server.cli", "canary", model, "--baseline", baseline]
        command += ["--canary", canary, "--metrics", e2e.router_metrics, "--window", str(WINDOW_S)]
        command += ["--min-requests", "20", "--json"]
        ran = subprocess.run(command, capture_output=True, text=True, timeout=60)
    finally:
        stop.set()
        for sender in senders:  # no request of ours lands in a later test's window
            sender.join(timeout=30)
    return ran.returncode, json.loads(ran.stdout)


def test_a_version_that_answers_like_its_baseline_passes(e2e: E2E) -> None:
    code, verdict = judged(e2e, "mlp", "1", "2", 512)  # the same weights under two versions
    assert verdict["outcome"] == "pass", verdict
    assert code == 0


def test_a_slower_version_fails_on_latency_with_the_numbers(e2e: E2E) -> None:
    code, verdict = judged(e2e, "echo", "1", "slow", echo.WIDTH)  # 300 ms per batch
    assert verdict["outcome"] == "fail", verdict
    assert code == 1
    assert any("slower" in reason for reason in verdict["reasons"])
    numbers = verdict["numbers"]
    # The baseline shares the node with the slow batches, so it waits too; the canary is
    # still slower, and most of its requests take longer than most of the baseline's.
    assert numbers["canary_p50_ms"] > numbers["baseline_p50_ms"]
    assert numbers["p_canary_slower"] > 0.6
