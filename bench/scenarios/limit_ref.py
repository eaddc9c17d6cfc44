"""The limit reference: what a batching gRPC server with no platform features does with the
same ``mlp`` on this machine (shared/BASELINES.md). One process: grpc.aio serving Ferryman's
own ``Inference.Predict`` (so ``ferryman_server.cli.bench.loadgen`` drives it exactly as it drives a
router), and an asyncio micro-batcher that runs a batch at once when the model is idle and,
when it frees up, takes everything queued (up to ``--max-batch``) into the next. The forward
runs in one worker thread with 1 torch thread, the same seeded weights as the demo.

With ``--echo`` it is the bare floor instead: the same unary call answering its inputs, no
model (what a Python gRPC hop costs by itself). Run as a module it serves until SIGTERM;
``limit_reference()`` starts it in its own process and stops it by PID. The distance
between it and Ferryman, measured in one run, is the platform's own cost.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import grpc
import numpy as np

from bench.scenarios.ray_peer import serving
from ferryman.tensors import decode, encode
from ferryman.v1 import common_pb2, inference_pb2, inference_pb2_grpc

MAX_BATCH = 64


class MicroBatcher:
    """Requests in, one forward per batch out: dispatch at once while idle, take what queued."""

    def __init__(self, torch_threads: int, max_batch: int) -> None:
        import torch

        from ferryman_server.gpu_node.demo.mlp import build_mlp

        torch.set_num_threads(torch_threads)
        self._torch = torch
        self._model = build_mlp(seed=0)
        self._max_batch = max_batch
        self._queue: asyncio.Queue[tuple[np.ndarray[Any, Any], asyncio.Future[np.ndarray[Any, Any]]]] = (
            asyncio.Queue()
        )
        self._pool = ThreadPoolExecutor(1)

    def _forward(self, rows: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        with self._torch.inference_mode():
            out: np.ndarray[Any, Any] = self._model(self._torch.from_numpy(rows)).numpy()
        return out

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self._queue.get()]
            while not self._queue.empty() and len(batch) < self._max_batch:
                batch.append(self._queue.get_nowait())
            rows = np.concatenate([x for x, _ in batch])
            out = await loop.run_in_executor(self._pool, self._forward, rows)
            start = 0
            for x, future in batch:
                if not future.done():
                    future.set_result(out[start : start + len(x)])
                start += len(x)

    async def infer(self, x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        future: asyncio.Future[np.ndarray[Any, Any]] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((x, future))
        return await future


class Servicer(inference_pb2_grpc.InferenceServicer):
    def __init__(self, batcher: MicroBatcher) -> None:
        self._batcher = batcher

    async def Predict(
        self, request: inference_pb2.PredictRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> inference_pb2.PredictResponse:
        out = await self._batcher.infer(decode(request.inputs[0].tensor))
        return inference_pb2.PredictResponse(
            request_id=request.request_id,
            model="mlp",
            version="limit",
            outputs=[common_pb2.NamedTensor(name="output", tensor=encode(out))],
        )


class EchoServicer(inference_pb2_grpc.InferenceServicer):
    """The bare floor: a grpc.aio unary call that answers its inputs, no model, no batching."""

    async def Predict(
        self, request: inference_pb2.PredictRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> inference_pb2.PredictResponse:
        return inference_pb2.PredictResponse(
            request_id=request.request_id, model=request.model, version="echo", outputs=request.inputs
        )


async def serve(port: int, torch_threads: int, max_batch: int, echo: bool = False) -> None:
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    batcher = None if echo else MicroBatcher(torch_threads, max_batch)
    servicer = EchoServicer() if batcher is None else Servicer(batcher)
    inference_pb2_grpc.add_InferenceServicer_to_server(servicer, server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    runner = None if batcher is None else asyncio.create_task(batcher.run())
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    if runner is not None:
        runner.cancel()
    await server.stop(grace=None)


@contextmanager
def limit_reference(
    port: int, torch_threads: int = 1, max_batch: int = MAX_BATCH, echo: bool = False
) -> Iterator[int]:
    """The reference serving on ``port`` until the block ends (``echo``: the bare echo
    server instead); yields its PID."""
    command = [sys.executable, "-m", "bench.scenarios.limit_ref", "--port", str(port)]
    command += ["--torch-threads", str(torch_threads), "--max-batch", str(max_batch)]
    command += ["--echo"] if echo else []
    with serving(command, f"127.0.0.1:{port}", "the limit reference") as pid:
        yield pid


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--max-batch", type=int, default=MAX_BATCH)
    parser.add_argument("--echo", action="store_true", help="the bare echo server, no model")
    opts = parser.parse_args()
    asyncio.run(serve(opts.port, opts.torch_threads, opts.max_batch, opts.echo))


if __name__ == "__main__":
    main()
