"""Loads on demand and LRU eviction with real nodes, a real batcher and a real registry: two
nodes whose memory budgets hold one of three versions each. Every version's requests are
answered; a version that does not fit pushes out the fleet's least recently used one;
no node ever holds more than its budget; loads and evictions are audited and counted."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import numpy as np
import torch
from batcher_client import item, submit_all
from batcher_platform import REGISTRY_REFRESH_S, register
from harness import ServiceMain, ServiceThread
from internal import internal_channel, service_metadata
from metrics_scrape import sample
from node_helpers import node_settings
from torch import nn

from ferryman.tensors import decode
from ferryman.v1 import node_pb2, node_pb2_grpc
from ferryman_server.batcher.server import serve_batcher
from ferryman_server.batcher.settings import BatcherSettings
from ferryman_server.gpu_node.server import serve_node
from ferryman_server.gpu_node.settings import NodeSettings
from ferryman_server.kernel.config import CommonSettings
from ferryman_server.kernel.net import free_port
from ferryman_server.registry.db import make_engine
from ferryman_server.registry.migrate import upgrade
from ferryman_server.registry.reader import RegistryReader
from ferryman_server.registry.writer import RegistryWriter

MIB = 1 << 20
WIDTH = 64
HIDDEN = 500_000
"""128 MB of float32 weights a version: big beside what a load's bookkeeping adds."""
BUDGET = 200 * MIB
"""Holds one version and not two."""
VERSIONS = ("a", "b", "c")
SCHEMA = {
    "inputs": [{"name": "input", "dtype": "FP32", "shape": [WIDTH]}],
    "outputs": [{"name": "output", "dtype": "FP32", "shape": [1]}],
}
BUDGET_S = 60.0


def build(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(WIDTH, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 1)).eval()


def write_version(path: Path, seed: int) -> Path:
    torch.jit.save(torch.jit.script(build(seed)), str(path))
    return path


def node_main(settings: NodeSettings, common: CommonSettings) -> ServiceMain:
    return lambda stop, ready: serve_node(settings, common, stop, ready)


def loaded(addresses: dict[str, str]) -> dict[str, dict[str, node_pb2.LoadedVersion]]:
    """What each node holds, by its own NodeInfo."""
    held = {}
    for name, address in addresses.items():
        with internal_channel(address) as channel:
            info = node_pb2_grpc.NodeStub(channel).NodeInfo(
                node_pb2.NodeInfoRequest(), metadata=service_metadata(), timeout=10
            )
        assert info.memory_budget == BUDGET
        serving = {v.version: v for v in info.versions if v.state == node_pb2.VERSION_STATE_SERVING}
        assert sum(v.memory_bytes for v in serving.values()) <= BUDGET, f"{name} overcommitted: {serving}"
        held[name] = serving
    return held


def where(held: dict[str, dict[str, node_pb2.LoadedVersion]]) -> dict[str, str]:
    """version -> the node serving it."""
    return {version: node for node, versions in held.items() for version in versions}


def test_three_versions_on_two_nodes_that_each_hold_one(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    engine = make_engine(url)
    upgrade(engine)
    writer, reader = RegistryWriter(engine, actor="test"), RegistryReader(engine)
    x = np.random.default_rng(0).standard_normal((1, WIDTH), dtype=np.float32)
    expected = {}
    for seed, version in enumerate(VERSIONS):
        artifact = write_version(tmp_path / f"{version}.pt", seed)
        register(writer, "big", version, artifact, "torchscript", SCHEMA, max_batch=2, nodes=())
        expected[version] = build(seed)(torch.from_numpy(x)).detach().numpy()
    common = CommonSettings(data_dir=tmp_path, database_url=url, registry_refresh_s=REGISTRY_REFRESH_S)
    nodes, addresses = [], {}
    for name in ("n1", "n2"):
        settings = node_settings(
            name=name,
            use_registry=True,
            heartbeat_interval_s=0.2,
            memory_budget_bytes=BUDGET,
            evict_after_idle_s=0,  # the test's requests are a moment apart
        )
        node = ServiceThread(node_main(settings, common), name)
        nodes.append(node)
        addresses[name] = node.start()
    metrics = f"127.0.0.1:{free_port()}"
    batcher_settings = BatcherSettings(listen="127.0.0.1:0", metrics_listen=metrics)
    batcher = ServiceThread(
        lambda stop, ready: serve_batcher(batcher_settings, common, stop, ready), "batcher"
    )
    address = batcher.start()

    def ask(version: str) -> None:
        request_id = f"{version}-{uuid.uuid4().hex[:8]}"
        result = submit_all(address, [item(request_id, x, model="big", version=version, budget_s=BUDGET_S)])
        answer = result[request_id]
        assert answer.status.code == 0, f"big:{version}: {answer.status.message}"
        np.testing.assert_allclose(decode(answer.outputs[0].tensor), expected[version], rtol=1e-4, atol=1e-4)
        time.sleep(0.05)  # the next use is strictly later (eviction goes by it)

    try:
        ask("a")
        ask("b")
        first = where(loaded(addresses))
        assert set(first) == {"a", "b"} and first["a"] != first["b"], "each on its own node, nothing evicted"
        ask("a")  # b is now the least recently used
        ask("c")
        now = where(loaded(addresses))
        assert set(now) == {"a", "c"}, f"b, the least recently used, is the one evicted: {now}"
        assert now["c"] == first["b"] and now["a"] == first["a"], "a did not move"
        ask("b")  # a was used before c: a goes
        assert set(where(loaded(addresses))) == {"b", "c"}
        evictions = [e for e in reader.audit_events(limit=50) if e.action == "node.evict"]
        assert [e.entity_key.partition("@")[0] for e in reversed(evictions)] == ["big:b", "big:a"]
        assert {e.detail["for"] for e in evictions} == {"big:c", "big:b"}
        demand_loads = sum(
            sample(
                f"http://{metrics}/metrics",
                "ferryman_demand_loads_total",
                model="big",
                version=v,
                outcome="loaded",
            )
            for v in VERSIONS
        )
        assert demand_loads == 4, "a, b, c, and b again"
    finally:
        batcher.stop()
        for node in nodes:
            node.stop()
        engine.dispose()
