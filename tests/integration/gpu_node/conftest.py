"""A real node (grpc.aio server on a free port) with every runtime format loaded."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from harness import ServiceThread
from internal import internal_channel
from node_helpers import Artifacts, build_artifacts, node_settings, spec

from ferryman.v1 import node_pb2, node_pb2_grpc
from ferryman_server.gpu_node.demo import echo, minilm, mlp
from ferryman_server.gpu_node.server import serve_node
from ferryman_server.kernel.config import CommonSettings


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Artifacts:
    return build_artifacts(tmp_path_factory.mktemp("artifacts"))


@pytest.fixture(scope="session")
def node_address(artifacts: Artifacts, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A node with mlp (torch_export and torchscript), minilm and echo test models loaded."""
    common = CommonSettings(data_dir=tmp_path_factory.mktemp("node-data"))
    service = ServiceThread(lambda stop, ready: serve_node(node_settings(), common, stop, ready), "node")
    address = service.start()
    stub = node_pb2_grpc.NodeStub(internal_channel(address))
    for version_spec in (
        spec("mlp", "1", artifacts.mlp_export, "torch_export", mlp.SCHEMA, max_batch_size=128),
        spec("mlp-ts", "1", artifacts.mlp_script, "torchscript", mlp.SCHEMA, max_batch_size=128),
        spec(
            "minilm",
            "1",
            artifacts.minilm_dir,
            "python",
            minilm.SCHEMA,
            handler="ferryman_server.gpu_node.demo.minilm:MiniLMHandler",
            max_batch_size=8,
        ),
        spec(
            "echo",
            "poison",
            artifacts.echo_poison,
            "python",
            echo.SCHEMA,
            handler="ferryman_server.gpu_node.demo.echo:EchoHandler",
            max_batch_size=16,
        ),
        spec(
            "echo",
            "oom",
            artifacts.echo_oom,
            "python",
            echo.SCHEMA,
            handler="ferryman_server.gpu_node.demo.echo:EchoHandler",
            max_batch_size=16,
        ),
    ):
        loaded = stub.LoadModel(node_pb2.LoadModelRequest(spec=version_spec))
        assert loaded.state == node_pb2.VERSION_STATE_SERVING, loaded.reason
    yield address
    service.stop()


@pytest.fixture
def node(node_address: str) -> Iterator[node_pb2_grpc.NodeStub]:
    with internal_channel(node_address) as channel:
        yield node_pb2_grpc.NodeStub(channel)
