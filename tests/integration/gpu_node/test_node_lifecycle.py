"""A node process with the registry: register, load placements, heartbeat, and on
SIGTERM report NOT_SERVING at once, finish the in-flight batch, deregister, exit 0."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from internal import internal_channel
from node_helpers import node_subprocess

from ferryman.tensors import encode
from ferryman.v1 import common_pb2, node_pb2, node_pb2_grpc
from ferryman_server.gpu_node.demo import echo
from ferryman_server.kernel.net import free_port
from ferryman_server.registry.db import make_engine
from ferryman_server.registry.migrate import upgrade
from ferryman_server.registry.reader import RegistryReader
from ferryman_server.registry.writer import RegistryWriter, VersionSpec

# Left out of make test-fast: node processes drained and stopped.
pytestmark = pytest.mark.slow

START_TIMEOUT_S = 90.0
SLOW_BATCH_MS = 2000


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def health_status(address: str, service: str = "") -> int | None:
    try:
        with grpc.insecure_channel(address) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            return int(stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=1).status)
    except grpc.RpcError:
        return None


@pytest.fixture
def registry_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    engine = make_engine(url)
    upgrade(engine)
    artifact = echo.write_config(tmp_path / "echo.json")
    writer = RegistryWriter(engine)
    writer.register_version(
        VersionSpec(
            model="echo",
            version="1",
            artifact=str(artifact),
            format="python",
            handler="ferryman_server.gpu_node.demo.echo:EchoHandler",
            io_schema=echo.SCHEMA,
            max_batch_size=4,
        )
    )
    writer.place("echo", "1")
    engine.dispose()
    return url


@pytest.fixture
def node_process(registry_url: str, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    port = free_port()
    proc = node_subprocess("drain-node", f"127.0.0.1:{port}", registry_url, tmp_path, stderr=subprocess.PIPE)
    yield proc, f"127.0.0.1:{port}"
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)


def test_node_registers_loads_placements_and_heartbeats(
    node_process: tuple[subprocess.Popen[bytes], str], registry_url: str
) -> None:
    _, address = node_process
    wait_for(
        lambda: health_status(address) == health_pb2.HealthCheckResponse.SERVING, START_TIMEOUT_S, "SERVING"
    )
    assert health_status(address, "echo:1") == health_pb2.HealthCheckResponse.SERVING
    reader = RegistryReader(make_engine(registry_url))
    wait_for(lambda: reader.nodes()[0].loaded_versions == ["echo:1"], 5, "heartbeat with loaded versions")
    node = reader.nodes()[0]
    assert (node.name, node.lifecycle, node.address, node.device) == ("drain-node", "READY", address, "cpu")
    first = node.last_heartbeat
    wait_for(lambda: reader.nodes()[0].last_heartbeat > first, 5, "a later heartbeat")


def test_sigterm_drains_in_flight_batch_then_exits(
    node_process: tuple[subprocess.Popen[bytes], str], registry_url: str
) -> None:
    proc, address = node_process
    wait_for(
        lambda: health_status(address) == health_pb2.HealthCheckResponse.SERVING, START_TIMEOUT_S, "SERVING"
    )
    channel = internal_channel(address)
    stub = node_pb2_grpc.NodeStub(channel)
    row = np.arange(echo.WIDTH, dtype=np.float32).reshape(1, -1)
    request = node_pb2.InferBatchRequest(
        model="echo",
        version="1",
        parameters={"delay_ms": str(SLOW_BATCH_MS)},
        items=[
            node_pb2.BatchItem(
                request_id="in-flight", inputs=[common_pb2.NamedTensor(name="input", tensor=encode(row))]
            )
        ],
    )
    with ThreadPoolExecutor(1) as pool:
        in_flight = pool.submit(stub.InferBatch, request, timeout=30)
        time.sleep(SLOW_BATCH_MS / 4000)  # the batch is running now
        proc.send_signal(signal.SIGTERM)
        wait_for(
            lambda: health_status(address) == health_pb2.HealthCheckResponse.NOT_SERVING, 1.0, "NOT_SERVING"
        )
        assert not in_flight.done(), "health must flip before the batch ends"
        assert health_status(address, "echo:1") == health_pb2.HealthCheckResponse.NOT_SERVING
        with pytest.raises(grpc.RpcError) as refused:
            stub.InferBatch(request, timeout=5)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        response = in_flight.result()
    assert response.items[0].status.code == 0
    assert proc.wait(30) == 0, proc.stderr.read().decode() if proc.stderr else ""
    channel.close()
    node = RegistryReader(make_engine(registry_url)).nodes()[0]
    assert node.lifecycle == "GONE"
