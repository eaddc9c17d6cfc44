"""Killing a node (kill -9) with a batch in flight loses no request: it completes on the other."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
from batcher_client import OpenStream, item
from batcher_platform import Platform, wait_for_replicas
from internal import internal_channel
from node_helpers import node_subprocess

from ferryman.tensors import decode
from ferryman.v1 import node_pb2, node_pb2_grpc
from ferryman_server.gpu_node.demo import echo
from ferryman_server.kernel.net import free_port
from ferryman_server.registry.db import make_engine
from ferryman_server.registry.reader import RegistryReader
from ferryman_server.registry.writer import RegistryWriter, VersionSpec

# Left out of make test-fast: node processes killed.
pytestmark = pytest.mark.slow

KILL_NODES = ("k1", "k2")
BATCH_MS = 1500


@pytest.fixture(scope="module")
def node_processes(platform: Platform) -> Iterator[dict[str, tuple[subprocess.Popen[bytes], str]]]:
    engine = make_engine(platform.registry_url)
    writer = RegistryWriter(engine, actor="test")
    writer.register_version(
        VersionSpec(
            model="echo",
            version="kill",
            artifact=str(echo.write_config(platform.artifacts / "kill.json")),
            format="python",
            handler="ferryman_server.gpu_node.demo.echo:EchoHandler",
            io_schema=echo.SCHEMA,
            max_batch_size=4,
        )
    )
    procs: dict[str, tuple[subprocess.Popen[bytes], str]] = {}
    for name in KILL_NODES:
        writer.place("echo", "kill", name)
        address = f"127.0.0.1:{free_port()}"
        proc = node_subprocess(name, address, platform.registry_url, platform.common.data_dir)
        procs[name] = (proc, address)
    wait_for_replicas(RegistryReader(engine), KILL_NODES, {"echo:kill"})
    time.sleep(0.5)  # the batcher's directory refreshes every 0.1 s
    yield procs
    for proc, _ in procs.values():
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
    engine.dispose()


def busy_node(procs: dict[str, tuple[subprocess.Popen[bytes], str]]) -> str | None:
    for name, (_, address) in procs.items():
        with internal_channel(address) as channel:
            info = node_pb2_grpc.NodeStub(channel).NodeInfo(node_pb2.NodeInfoRequest(), timeout=2)
        if any(v.in_flight > 0 for v in info.versions):
            return name
    return None


def test_killed_node_batch_completes_on_the_other(
    platform: Platform, node_processes: dict[str, tuple[subprocess.Popen[bytes], str]]
) -> None:
    stream = OpenStream(platform.batcher)
    try:
        value = np.full((1, echo.WIDTH), 5.0, dtype=np.float32)
        stream.send(
            item("survivor", value, version="kill", budget_s=20, parameters={"delay_ms": str(BATCH_MS)})
        )
        deadline = time.monotonic() + BATCH_MS / 1000
        victim = None
        while victim is None and time.monotonic() < deadline:
            victim = busy_node(node_processes)
            threading.Event().wait(0.05)
        assert victim is not None, "the batch never reached a node"
        node_processes[victim][0].send_signal(signal.SIGKILL)
        result = stream.receive()
    finally:
        stream.close()
    assert result.status.code == 0, result.status.message
    assert result.node != victim and result.node in KILL_NODES
    np.testing.assert_array_equal(decode(result.outputs[0].tensor), value * 2)
