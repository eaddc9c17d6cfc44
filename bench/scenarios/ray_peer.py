"""The peer: the same ``mlp`` (same seeded weights, same torch threads) behind Ray Serve.

One replica with ``@serve.batch``, reached through Ray Serve's gRPC proxy with Ferryman's own
``Inference`` service, so ``ferryman_server.cli.bench.loadgen`` drives it exactly as it drives a router.
Run as a module it serves until SIGTERM; ``ray_serve()`` starts it in its own session and
stops the whole process tree by PID. Ray is the optional ``bench`` extra, never a runtime need.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import grpc
import numpy as np

from bench.scenarios.measure import kill_pids, tree_pids
from ferryman.tensors import decode, encode
from ferryman.v1 import common_pb2, inference_pb2, inference_pb2_grpc

SERVICER = "ferryman.v1.inference_pb2_grpc.add_InferenceServicer_to_server"
READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 20.0
PROBE_INTERVAL_S = 0.5


def probe_request() -> inference_pb2.PredictRequest:
    """One valid ``mlp`` request (used to wait for readiness)."""
    from ferryman_server.gpu_node.demo.mlp import IN_FEATURES

    x = np.zeros((1, IN_FEATURES), np.float32)
    return inference_pb2.PredictRequest(
        model="mlp", inputs=[common_pb2.NamedTensor(name="input", tensor=encode(x))]
    )


def serve_forever(port: int, max_batch: int, wait_ms: float, torch_threads: int) -> None:
    """Start Ray, deploy the batched mlp behind the gRPC proxy, block until SIGTERM."""
    import ray
    import torch
    from ray import serve
    from ray.serve.config import gRPCOptions

    from ferryman_server.gpu_node.demo.mlp import build_mlp

    @serve.deployment(num_replicas=1, ray_actor_options={"num_cpus": 1}, max_ongoing_requests=1024)
    class MLP:
        def __init__(self) -> None:
            torch.set_num_threads(torch_threads)
            self.model = build_mlp(seed=0)

        @serve.batch(max_batch_size=max_batch, batch_wait_timeout_s=wait_ms / 1000)  # type: ignore[untyped-decorator]
        async def forward(self, rows: list[np.ndarray[Any, Any]]) -> list[np.ndarray[Any, Any]]:
            with torch.inference_mode():
                out = self.model(torch.from_numpy(np.concatenate(rows))).numpy()
            return list(np.split(out, np.cumsum([len(r) for r in rows])[:-1]))

        async def Predict(self, request: inference_pb2.PredictRequest) -> inference_pb2.PredictResponse:
            out = await self.forward(decode(request.inputs[0].tensor))
            return inference_pb2.PredictResponse(
                request_id=request.request_id,
                model="mlp",
                version="ray",
                outputs=[common_pb2.NamedTensor(name="output", tensor=encode(out))],
            )

    # Tuned as we tune Ferryman for a benchmark: no per-request access log, warnings only.
    quiet = {"enable_access_log": False, "log_level": "WARNING"}
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    serve.start(grpc_options=gRPCOptions(port=port, grpc_servicer_functions=[SERVICER]), logging_config=quiet)
    serve.run(MLP.bind(), name="mlp", route_prefix="/mlp", logging_config=quiet)  # type: ignore[attr-defined]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    serve.shutdown()
    ray.shutdown()


def _answers(address: str) -> bool:
    with grpc.insecure_channel(address) as channel:
        try:
            inference_pb2_grpc.InferenceStub(channel).Predict(
                probe_request(), metadata=(("application", "mlp"),), timeout=2
            )
            return True
        except grpc.RpcError:
            return False


def wait_answering(address: str, proc: subprocess.Popen[bytes], what: str) -> None:
    """Until the server ``proc`` started answers an ``mlp`` request at ``address``."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not _answers(address):
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with code {proc.returncode}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not answer in time")
        time.sleep(PROBE_INTERVAL_S)


@contextmanager
def serving(command: list[str], address: str, what: str, **popen: Any) -> Iterator[int]:
    """A server process answering ``mlp`` at ``address`` until the block ends (yields its
    PID); stopped with SIGTERM, then killed with everything it started."""
    proc = subprocess.Popen(command, **popen)
    try:
        wait_answering(address, proc, what)
        yield proc.pid
    finally:
        pids = tree_pids([proc.pid])
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        kill_pids(pids)  # anything it left behind


@contextmanager
def ray_serve(port: int, max_batch: int = 32, wait_ms: float = 5.0, torch_threads: int = 1) -> Iterator[int]:
    """Ray Serve with the batched mlp on 127.0.0.1:``port``; yields the root PID once it answers."""
    args = ["--port", str(port), "--max-batch", str(max_batch), "--wait-ms", str(wait_ms)]
    command = [sys.executable, "-m", "bench.scenarios.ray_peer", *args, "--torch-threads", str(torch_threads)]
    with serving(
        command,
        f"127.0.0.1:{port}",
        "Ray Serve",
        start_new_session=True,  # Ray's daemons stay in this session: one group to stop
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    ) as pid:
        yield pid


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--max-batch", type=int, default=32)
    parser.add_argument("--wait-ms", type=float, default=5.0)
    parser.add_argument("--torch-threads", type=int, default=1)
    ns = parser.parse_args()
    serve_forever(ns.port, ns.max_batch, ns.wait_ms, ns.torch_threads)


if __name__ == "__main__":
    main()
