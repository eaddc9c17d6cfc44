"""A remote LoRA adapter (pushed into the registry) placed with its base on a fresh node:
nothing tells it from a model until it is fetched, so it may load first and find its base
not serving yet. It is tried again once the base serves, instead of staying FAILED."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from batcher_platform import register
from harness import ServiceThread
from internal import internal_channel, service_metadata
from lora_helpers import write_adapter
from node_helpers import node_settings

from ferryman.v1 import node_pb2, node_pb2_grpc
from ferryman_server.gpu_node.demo import smollm2
from ferryman_server.gpu_node.server import serve_node
from ferryman_server.kernel.artifacts import pushed_uri
from ferryman_server.kernel.config import CommonSettings
from ferryman_server.registry.db import make_engine
from ferryman_server.registry.migrate import upgrade
from ferryman_server.registry.writer import RegistryWriter, VersionSpec

pytestmark = pytest.mark.slow

SETTLE_S = 180.0
"""Stops a test that would wait forever (SmolLM2 loads in seconds); it times nothing."""


def states(stub: node_pb2_grpc.NodeStub) -> dict[str, str]:
    info = stub.NodeInfo(node_pb2.NodeInfoRequest(), metadata=service_metadata(), timeout=10)
    return {f"{v.model}:{v.version}": node_pb2.VersionState.Name(v.state) for v in info.versions}


def test_a_pushed_adapter_placed_before_its_base_serves_once_the_base_does(
    smollm2_artifact: Path, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    engine = make_engine(url)
    upgrade(engine)
    writer = RegistryWriter(engine, actor="test")
    register(
        writer, "smollm2", "1", smollm2_artifact, "causal_lm", smollm2.SCHEMA, max_batch=1, nodes=("lora",)
    )
    model, _ = smollm2.load(smollm2_artifact)
    adapter = tmp_path / "adapter"  # on the author's machine: the node has only the registry
    write_adapter(adapter, model, seed=1, base="smollm2:1")
    stored = writer.push_artifact(adapter)
    # "aa-" sorts first: the node meets the adapter before its base.
    writer.register_version(
        VersionSpec(
            "aa-fine-tune", "1", pushed_uri(stored.sha256), "causal_lm", smollm2.SCHEMA, max_batch_size=1
        )
    )
    writer.place("aa-fine-tune", "1", "lora")
    common = CommonSettings(data_dir=tmp_path / "node", database_url=url)
    settings = node_settings(
        name="lora", use_registry=True, placement_refresh_s=0.2, torch_threads=1, generation_slots=2,
        generation_max_len=256,
    )  # fmt: skip
    node = ServiceThread(lambda stop, ready: serve_node(settings, common, stop, ready), "lora")
    address = node.start()
    try:
        stub = node_pb2_grpc.NodeStub(internal_channel(address))
        deadline = time.monotonic() + SETTLE_S
        while states(stub) != {
            "smollm2:1": "VERSION_STATE_SERVING",
            "aa-fine-tune:1": "VERSION_STATE_SERVING",
        }:
            assert time.monotonic() < deadline, states(stub)
            time.sleep(0.2)
    finally:
        node.stop()
        engine.dispose()
