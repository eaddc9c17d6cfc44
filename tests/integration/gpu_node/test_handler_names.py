"""A tenant's Python handler is its own module, whatever its name: one named ``router`` (a
module) or ``registry`` (a package), the names of the platform's own rooms, is imported from
the tenant's code in a node process, never resolved to Ferryman's (whose modules all live
under ``ferryman_server``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import grpc
import numpy as np
from internal import internal_channel
from node_helpers import spec

from ferryman.tensors import decode, encode
from ferryman.v1 import common_pb2, node_pb2, node_pb2_grpc
from ferryman_server.gpu_node.demo import echo
from ferryman_server.kernel.net import free_port

READY_TIMEOUT_S = 60
HANDLER = """
from collections.abc import Mapping
from pathlib import Path

import torch

from ferryman_server.gpu_node.handler import BatchInput, RuntimeOutput

MARK = {mark}


class Handler:
    def load(self, path: Path, device: torch.device) -> None:
        self.device = device

    def predict(self, inputs: Mapping[str, BatchInput], parameters: Mapping[str, str]) -> RuntimeOutput:
        rows = inputs["input"]
        assert isinstance(rows, torch.Tensor)
        return RuntimeOutput(outputs={{"output": torch.full_like(rows, MARK)}})
"""


def write_handlers(root: Path) -> Path:
    """``router.py`` (a module) and ``registry/__init__.py`` (a package), each marking its
    answers with its own number."""
    root.mkdir()
    (root / "router.py").write_text(HANDLER.format(mark=11.0))
    (root / "registry").mkdir()
    (root / "registry" / "__init__.py").write_text(HANDLER.format(mark=22.0))
    return root


def test_a_handler_named_like_a_platform_room_is_the_tenants_own(tmp_path: Path) -> None:
    handlers = write_handlers(tmp_path / "handlers")
    address = f"127.0.0.1:{free_port()}"
    # As a deployment runs a node: the tenant's code on the path, the working directory
    # somewhere that is not the platform's checkout.
    env = {
        **os.environ,
        "PYTHONPATH": str(handlers),
        "FERRYMAN_DATA_DIR": str(tmp_path / "data"),
        "FERRYMAN_NODE_USE_REGISTRY": "false",
        "FERRYMAN_NODE_WARMUP_RUNS": "1",
        "FERRYMAN_LOG_LEVEL": "WARNING",
    }
    node = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ferryman_server.cli",
            "serve",
            "node",
            "--listen",
            address,
            "--device",
            "cpu",
        ],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
    )
    try:
        with internal_channel(address) as channel:
            grpc.channel_ready_future(channel).result(timeout=READY_TIMEOUT_S)
            stub = node_pb2_grpc.NodeStub(channel)
            artifact = echo.write_config(tmp_path / "config.json")
            for version, module, mark in (("router", "router", 11.0), ("registry", "registry", 22.0)):
                loaded = stub.LoadModel(
                    node_pb2.LoadModelRequest(
                        spec=spec(
                            "named", version, artifact, "python", echo.SCHEMA, handler=f"{module}:Handler"
                        )
                    ),
                    timeout=READY_TIMEOUT_S,
                )
                assert loaded.state == node_pb2.VERSION_STATE_SERVING, loaded.reason
                row = np.zeros((1, echo.WIDTH), np.float32)
                item = node_pb2.BatchItem(
                    request_id=version, inputs=[common_pb2.NamedTensor(name="input", tensor=encode(row))]
                )
                answer = stub.InferBatch(
                    node_pb2.InferBatchRequest(model="named", version=version, items=[item]), timeout=30
                )
                assert answer.items[0].status.code == 0, answer.items[0].status.message
                assert decode(answer.items[0].outputs[0].tensor).tolist() == [[mark] * echo.WIDTH]
    finally:
        node.terminate()
        node.wait(timeout=30)
