"""A node's memory budget over its gRPC API: what a placement pins is never evicted, nor is
a version running a batch; a load that does not fit is refused before any work unless its
caller lets the node evict, and then the least recently used idle version goes; whatever
happens, the versions it holds stay within the budget."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
from batcher_platform import register, wait_for_replicas
from harness import ServiceThread
from internal import internal_channel, service_metadata
from metrics_scrape import sample
from node_helpers import node_settings, node_subprocess, spec

from ferryman.tensors import encode
from ferryman.v1 import common_pb2, node_pb2, node_pb2_grpc
from ferryman_server.gpu_node.demo import echo, mlp
from ferryman_server.gpu_node.server import serve_node
from ferryman_server.kernel.config import CommonSettings
from ferryman_server.kernel.net import free_port
from ferryman_server.registry.db import make_engine
from ferryman_server.registry.migrate import upgrade
from ferryman_server.registry.reader import RegistryReader
from ferryman_server.registry.writer import RegistryWriter

MIB = 1 << 20
BUDGET = 250 * MIB
EXPECTED = 100 * MIB
"""What each on-demand version is said to need (echo's own footprint is a few KB): two fit
beside the pinned one, three do not."""
HANDLER = "ferryman_server.gpu_node.demo.echo:EchoHandler"
SLOW_MS = 3000
PLACED_BYTES = 60 * MIB
"""A placed version's artifact: more than the room left beside a, d and the pinned one."""
PLACE_WAIT_S = 30.0
FIRST_LOAD_CHARGE = 48 * MIB
"""The 20 MB MLP was charged 24 MiB with the format warmed; 55-68 MiB with only its loader imported."""
"""Well above the MLP's 4 MB of weights and its warm-up, well below the ~100 MiB its first
load was charged when the loader's imports counted as the version's."""


def echo_spec(artifact: Path, version: str) -> node_pb2.ModelVersionSpec:
    return spec("echo", version, artifact, "python", echo.SCHEMA, handler=HANDLER)


def held(stub: node_pb2_grpc.NodeStub) -> dict[str, node_pb2.LoadedVersion]:
    info = stub.NodeInfo(node_pb2.NodeInfoRequest(), metadata=service_metadata(), timeout=10)
    versions = {v.version: v for v in info.versions if v.state == node_pb2.VERSION_STATE_SERVING}
    assert info.memory_budget == BUDGET
    assert sum(v.memory_bytes for v in versions.values()) <= BUDGET, f"overcommitted: {versions}"
    return versions


def run(stub: node_pb2_grpc.NodeStub, version: str, delay_ms: int = 0) -> None:
    item = node_pb2.BatchItem(
        request_id=f"{version}-{delay_ms}",
        inputs=[common_pb2.NamedTensor(name="input", tensor=encode(np.ones((1, echo.WIDTH), np.float32)))],
    )
    request = node_pb2.InferBatchRequest(
        model="echo", version=version, items=[item], parameters={"delay_ms": str(delay_ms)}
    )
    answer = stub.InferBatch(request, metadata=service_metadata(), timeout=30)
    assert answer.items[0].status.code == 0


def test_pinned_and_running_versions_stay_and_the_least_recently_used_goes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    engine = make_engine(url)
    upgrade(engine)
    writer = RegistryWriter(engine, actor="test")
    artifact = echo.write_config(tmp_path / "echo.json")
    register(writer, "echo", "pinned", artifact, "python", echo.SCHEMA, handler=HANDLER, nodes=("budget",))
    common = CommonSettings(data_dir=tmp_path, database_url=url)
    metrics = f"127.0.0.1:{free_port()}"
    settings = node_settings(
        name="budget",
        use_registry=True,
        heartbeat_interval_s=0.2,
        placement_refresh_s=0.2,
        memory_budget_bytes=BUDGET,
        evict_after_idle_s=0,
        metrics_listen=metrics,
    )
    node = ServiceThread(lambda stop, ready: serve_node(settings, common, stop, ready), "budget")
    address = node.start()
    try:
        wait_for_replicas(RegistryReader(engine), ("budget",), {"echo:pinned"})
        stub = node_pb2_grpc.NodeStub(internal_channel(address))

        def load(version: str, *, evict: bool, expected: int = EXPECTED) -> node_pb2.LoadModelResponse:
            request = node_pb2.LoadModelRequest(
                spec=echo_spec(artifact, version), memory_bytes=expected, evict=evict
            )
            answer: node_pb2.LoadModelResponse = stub.LoadModel(
                request, metadata=service_metadata(), timeout=30
            )
            return answer

        assert held(stub)["pinned"].pinned
        for version in ("a", "b"):
            assert load(version, evict=True).state == node_pb2.VERSION_STATE_SERVING
        run(stub, "a")  # b is now the least recently used

        refused = load("c", evict=False)
        assert refused.no_room and refused.state == node_pb2.VERSION_STATE_FAILED
        assert refused.memory_bytes == EXPECTED and not refused.evicted
        assert set(held(stub)) == {"pinned", "a", "b"}, "a refusal evicts nothing"

        made_room = load("c", evict=True)
        assert made_room.state == node_pb2.VERSION_STATE_SERVING, made_room.reason
        assert list(made_room.evicted) == ["echo:b"]
        assert set(held(stub)) == {"pinned", "a", "c"}

        # a runs a slow batch: busy, it is passed over though c was used more recently.
        slow = threading.Thread(target=run, args=(stub, "a", SLOW_MS))
        slow.start()
        try:
            deadline = time.monotonic() + PLACE_WAIT_S
            while held(stub)["a"].in_flight == 0:
                assert time.monotonic() < deadline, "a's slow batch never started"
                time.sleep(0.01)
            assert list(load("d", evict=True).evicted) == ["echo:c"]
        finally:
            slow.join()
        assert set(held(stub)) == {"pinned", "a", "d"}

        too_big = load("e", evict=True, expected=BUDGET + MIB)
        assert too_big.no_room and not too_big.evicted, "nothing is evicted for what cannot fit anyway"
        assert "no room for echo:e" in too_big.reason
        assert set(held(stub)) == {"pinned", "a", "d"}
        assert held(stub)["pinned"].pinned, "the placement's version stayed throughout"

        # A placement made now makes its own room: it evicts the least recently used version
        # loaded on demand (a: its last batch began before d loaded).
        padded = tmp_path / "placed.json"
        padded.write_text(json.dumps({"pad": "x" * PLACED_BYTES}))
        register(writer, "echo", "placed", padded, "python", echo.SCHEMA, handler=HANDLER, nodes=("budget",))
        deadline = time.monotonic() + PLACE_WAIT_S
        while "placed" not in held(stub):
            assert time.monotonic() < deadline, held(stub)
            time.sleep(0.1)
        now = held(stub)
        assert set(now) == {"pinned", "d", "placed"} and now["placed"].pinned
        assert now["placed"].memory_bytes >= PLACED_BYTES
        evictions = sample(
            f"http://{metrics}/metrics", "ferryman_node_evictions_total", model="echo", version="b"
        )
        assert evictions == 1
    finally:
        node.stop()
        engine.dispose()


def test_a_fresh_nodes_first_version_is_not_charged_for_its_formats_libraries(tmp_path: Path) -> None:
    """A node process's first torch.export load imports the format's loader (torch._dynamo
    and its serializer, sympy for symbolic shapes, ~50-70 MB): the process's, shared by every
    later load, not the first version's. The 20 MB MLP is charged about its own size, so a
    budget is not spent on code."""
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    engine = make_engine(url)
    upgrade(engine)
    writer = RegistryWriter(engine, actor="test")
    artifact = mlp.export_mlp(tmp_path / "mlp.pt2")
    register(writer, "mlp", "1", artifact, "torch_export", mlp.SCHEMA, max_batch=8, nodes=("fresh",))
    address = f"127.0.0.1:{free_port()}"
    proc = node_subprocess("fresh", address, url, tmp_path)
    try:
        wait_for_replicas(RegistryReader(engine), ("fresh",), {"mlp:1"})
        stub = node_pb2_grpc.NodeStub(internal_channel(address))
        info = stub.NodeInfo(node_pb2.NodeInfoRequest(), metadata=service_metadata(), timeout=10)
        (loaded,) = info.versions
        assert 0 < loaded.memory_bytes < FIRST_LOAD_CHARGE, loaded.memory_bytes
        print(f"first version charged {loaded.memory_bytes / MIB:.1f} MiB")
    finally:
        proc.kill()
        proc.wait(10)
        engine.dispose()
