"""InferBatch items/s for ``mlp`` at batch 1..128 beside the model's own forward.

The node runs as its own process (``ferryman serve node --no-registry``) with the
same torch thread count as the direct forward; the client sends one batch at a time
(closed loop, one in flight), so the difference is the node's overhead: gRPC,
request decoding, batch assembly, output splitting.

    python -m bench.node_overhead [--threads 1] [--seconds 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
import numpy as np
import torch

from ferryman.tensors import encode
from ferryman.v1 import common_pb2, node_pb2, node_pb2_grpc
from ferryman_server.gpu_node.demo import mlp
from ferryman_server.kernel.artifacts import artifact_sha256
from ferryman_server.kernel.config import CommonSettings
from ferryman_server.kernel.net import free_port
from ferryman_server.kernel.schema import IOSchema
from ferryman_server.kernel.serving import channel_options

BATCHES = (1, 8, 32, 128)
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
START_TIMEOUT_S = 60.0


def time_calls(call: object, seconds: float) -> list[float]:
    """Run ``call`` repeatedly for about ``seconds``; return each call's duration."""
    assert callable(call)
    call()  # warm
    durations = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        started = time.perf_counter()
        call()
        durations.append(time.perf_counter() - started)
    return durations


def start_node(threads: int, data_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "FERRYMAN_NODE_TORCH_THREADS": str(threads), "FERRYMAN_DATA_DIR": str(data_dir)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ferryman_server.cli",
            "serve",
            "node",
            "--listen",
            f"127.0.0.1:{port}",
            "--no-registry",
            "--device",
            "cpu",
            "--name",
            "bench-node",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    address = f"127.0.0.1:{port}"
    channel = grpc.insecure_channel(address)
    grpc.channel_ready_future(channel).result(timeout=START_TIMEOUT_S)
    channel.close()
    return proc, address


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads, both sides")
    parser.add_argument("--seconds", type=float, default=2.0, help="measurement time per batch size")
    opts = parser.parse_args()
    torch.set_num_threads(opts.threads)
    with tempfile.TemporaryDirectory() as tmp:
        artifact = mlp.export_mlp(Path(tmp) / "mlp.pt2")
        model = torch.export.load(str(artifact)).module()
        proc, address = start_node(opts.threads, Path(tmp))
        try:
            channel = grpc.insecure_channel(address, options=channel_options(MAX_MESSAGE_BYTES))
            stub = node_pb2_grpc.NodeStub(channel)
            auth = CommonSettings(data_dir=Path(tmp)).security().metadata()
            spec = node_pb2.ModelVersionSpec(
                model="mlp",
                version="1",
                artifact_uri=str(artifact),
                sha256=artifact_sha256(artifact),
                format="torch_export",
                schema=IOSchema.model_validate(mlp.SCHEMA).to_proto(),
                max_batch_size=max(BATCHES),
            )
            loaded = stub.LoadModel(
                node_pb2.LoadModelRequest(spec=spec), timeout=START_TIMEOUT_S, metadata=auth
            )
            assert loaded.state == node_pb2.VERSION_STATE_SERVING, loaded.reason
            print("| batch | forward items/s | InferBatch items/s | node/forward | overhead per batch |")
            print("|---:|---:|---:|---:|---:|")
            rng = np.random.default_rng(0)
            for batch in BATCHES:
                x = rng.standard_normal((batch, 512), dtype=np.float32)
                tensor = torch.from_numpy(x)

                def forward(t: torch.Tensor = tensor) -> None:
                    with torch.inference_mode():
                        model(t)

                request = node_pb2.InferBatchRequest(
                    model="mlp",
                    version="1",
                    items=[
                        node_pb2.BatchItem(
                            request_id=str(i),
                            inputs=[common_pb2.NamedTensor(name="input", tensor=encode(x[i : i + 1]))],
                        )
                        for i in range(batch)
                    ],
                )

                def infer(r: node_pb2.InferBatchRequest = request) -> None:
                    stub.InferBatch(r, timeout=30, metadata=auth)

                direct = statistics.median(time_calls(forward, opts.seconds))
                served = statistics.median(time_calls(infer, opts.seconds))
                print(
                    f"| {batch} | {batch / direct:,.0f} | {batch / served:,.0f} | {direct / served:.2f} "
                    f"| {(served - direct) * 1000:.2f} ms |"
                )
            channel.close()
        finally:
            proc.terminate()
            proc.wait(30)


if __name__ == "__main__":
    main()
