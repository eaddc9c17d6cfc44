"""A node never starts a batch nobody waits for any more: when a batch's deadline passes
while it waits for a worker, gRPC cancels the call and the queued batch is dropped unrun
(over real gRPC, a real slow model)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np
import pytest
from harness import ServiceThread
from internal import internal_channel
from metrics_scrape import sample
from node_helpers import node_settings, spec

from ferryman.tensors import encode
from ferryman.v1 import common_pb2, node_pb2, node_pb2_grpc
from ferryman_server.gpu_node.demo import echo
from ferryman_server.gpu_node.server import serve_node
from ferryman_server.kernel.config import CommonSettings
from ferryman_server.kernel.net import free_port

SLOW_MS = 400
SHORT_BUDGET_S = 0.15


def batch(tag: str) -> node_pb2.InferBatchRequest:
    row = np.zeros((1, echo.WIDTH), np.float32)
    item = node_pb2.BatchItem(
        request_id=tag, inputs=[common_pb2.NamedTensor(name="input", tensor=encode(row))]
    )
    return node_pb2.InferBatchRequest(model="echo", version="slow", items=[item])


def test_a_batch_whose_deadline_passed_in_the_node_queue_is_not_run(tmp_path: Path) -> None:
    metrics = f"127.0.0.1:{free_port()}"
    settings = node_settings(capacity=1, metrics_listen=metrics)
    common = CommonSettings(data_dir=tmp_path)
    node = ServiceThread(lambda stop, ready: serve_node(settings, common, stop, ready), "node")
    address = node.start()
    url = f"http://{metrics}/metrics"
    try:
        with internal_channel(address) as channel:
            stub = node_pb2_grpc.NodeStub(channel)
            artifact = echo.write_config(tmp_path / "slow.json", delay_ms=SLOW_MS)
            loaded = stub.LoadModel(
                node_pb2.LoadModelRequest(
                    spec=spec(
                        "echo",
                        "slow",
                        artifact,
                        "python",
                        echo.SCHEMA,
                        handler="ferryman_server.gpu_node.demo.echo:EchoHandler",
                    )
                )
            )
            assert loaded.state == node_pb2.VERSION_STATE_SERVING, loaded.reason
            with ThreadPoolExecutor(2) as pool:
                first = pool.submit(stub.InferBatch, batch("first"), timeout=30)
                time.sleep(0.05)  # the first batch holds the only worker
                late = pool.submit(stub.InferBatch, batch("late"), timeout=SHORT_BUDGET_S)
                assert first.result().items[0].status.code == 0
                with pytest.raises(grpc.RpcError) as refused:
                    late.result()
            assert refused.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            time.sleep(SLOW_MS / 1000)  # had it started, it would have finished by now
            assert sample(url, "ferryman_node_batches_total", model="echo", version="slow") == 1
    finally:
        node.stop()
