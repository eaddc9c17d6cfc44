"""``ferryman serve router --workers 2``: two router processes share one public port, the
connections are spread over both, a tenant's request limit stays exact across them (one
in-memory quota service, the first worker's), and SIGTERM stops both."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import grpc
import numpy as np
import psutil
import pytest
from metrics_scrape import scrape, total
from router_platform import E2E

from ferryman.tensors import encode
from ferryman.v1 import common_pb2, inference_pb2, inference_pb2_grpc
from ferryman_server.cli.up import is_serving
from ferryman_server.gpu_node.demo import echo
from ferryman_server.kernel.net import free_port, free_ports
from ferryman_server.registry.specs import QuotaLimits

# Left out of make test-fast: several router processes on one port.
pytestmark = pytest.mark.slow

LIMIT = 24
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


def test_two_workers_share_the_port_and_keep_the_request_limit_exact(e2e: E2E, tmp_path: Path) -> None:
    tenant = f"workers-{uuid.uuid4().hex[:6]}"
    key = e2e.writer.create_tenant(tenant).plaintext
    e2e.writer.set_quota(tenant, QuotaLimits(rpm=LIMIT))
    address, metrics = f"127.0.0.1:{free_port()}", free_ports(2)
    command = [
        sys.executable,
        "-m",
        "ferryman_server.cli",
        "serve",
        "router",
        "--workers",
        "2",
        "--listen",
        address,
    ]
    command += ["--batchers", e2e.batcher, "--metrics-listen", f"127.0.0.1:{metrics}"]
    env = {**os.environ, "FERRYMAN_DATABASE_URL": e2e.registry_url, "FERRYMAN_DATA_DIR": str(tmp_path)}
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        urls = [f"http://127.0.0.1:{metrics + i}/metrics" for i in range(2)]
        while not (is_serving(address) and all(_answers(url) for url in urls)):
            assert proc.poll() is None and time.monotonic() < deadline, "the workers did not start"
            time.sleep(0.2)
        workers = psutil.Process(proc.pid).children()
        assert len(workers) == 1, "one child worker beside the first"
        x = np.ones((1, echo.WIDTH), np.float32)
        request = inference_pb2.PredictRequest(
            model="echo", inputs=[common_pb2.NamedTensor(name="input", tensor=encode(x))]
        )
        codes: list[grpc.StatusCode] = []
        # A connection each (no shared subchannel): the kernel spreads them over the workers.
        for _ in range(2 * LIMIT):
            options = [("grpc.use_local_subchannel_pool", 1)]
            with grpc.insecure_channel(address, options) as channel:
                try:
                    inference_pb2_grpc.InferenceStub(channel).Predict(
                        request, metadata=[("authorization", f"Bearer {key}")], timeout=30
                    )
                    codes.append(grpc.StatusCode.OK)
                except grpc.RpcError as exc:
                    codes.append(exc.code())
        assert codes.count(grpc.StatusCode.OK) == LIMIT, codes
        assert codes.count(grpc.StatusCode.RESOURCE_EXHAUSTED) == LIMIT, codes
        served = [total(scrape(url), "ferryman_requests_total", tenant=tenant) for url in urls]
        assert all(n > 0 for n in served), f"requests by worker: {served}"
        assert sum(served) == 2 * LIMIT
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(STOP_TIMEOUT_S) == 0
        _, alive = psutil.wait_procs(workers, timeout=STOP_TIMEOUT_S)
        assert not alive, "the child worker outlived the first"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _answers(url: str) -> bool:
    try:
        scrape(url)
    except OSError:
        return False
    return True
