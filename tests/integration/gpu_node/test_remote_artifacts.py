"""A team's own model reaches a node that never had it on disk: registered from another
directory as ``s3://`` on a real S3-protocol server (moto's server mode, over HTTP) and
through ``ferryman model push`` (the registry itself), it is fetched into the node's cache
by sha256 and served; a corrupted object is refused by its checksum and the version FAILS
with both digests in its reason."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import boto3
import numpy as np
import pytest
import torch
from harness import ServiceThread
from internal import internal_channel, service_metadata
from node_helpers import node_settings

from ferryman.tensors import decode, encode
from ferryman.v1 import common_pb2, node_pb2, node_pb2_grpc
from ferryman_server.gpu_node.demo import mlp
from ferryman_server.gpu_node.server import serve_node
from ferryman_server.kernel.artifacts import artifact_sha256, pushed_uri
from ferryman_server.kernel.config import CommonSettings
from ferryman_server.kernel.net import free_port
from ferryman_server.registry.db import make_engine
from ferryman_server.registry.migrate import upgrade
from ferryman_server.registry.reader import RegistryReader
from ferryman_server.registry.writer import RegistryWriter, VersionSpec

# Left out of make test-fast: an S3 server process and a node loading three versions.
pytestmark = pytest.mark.slow

BUCKET = "models"
START_TIMEOUT_S = 30.0
SETTLE_TIMEOUT_S = 60.0
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "ferryman-test",
    "AWS_SECRET_ACCESS_KEY": "ferryman-test",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture(scope="module")
def s3() -> Iterator[str]:
    """moto's S3 server on a free port: its endpoint URL."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, "moto's S3 server did not start"
            time.sleep(0.1)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


def loaded(stub: node_pb2_grpc.NodeStub) -> dict[str, node_pb2.LoadedVersion]:
    info = stub.NodeInfo(node_pb2.NodeInfoRequest(), metadata=service_metadata(), timeout=10)
    return {f"{v.model}:{v.version}": v for v in info.versions}


def test_a_node_with_an_empty_disk_serves_models_from_s3_and_the_registry(
    s3: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in {**CREDENTIALS, "AWS_ENDPOINT_URL": s3}.items():
        monkeypatch.setenv(name, value)
    author = tmp_path / "author"  # the team's laptop: no node ever sees this directory
    author.mkdir()
    from_s3, pushed = mlp.export_mlp(author / "mlp.pt2", seed=0), mlp.export_mlp(author / "mlp-b.pt2", seed=1)
    client = boto3.client("s3")
    client.create_bucket(Bucket=BUCKET)
    client.upload_file(str(from_s3), BUCKET, "mlp.pt2")
    corrupt = bytearray(from_s3.read_bytes())
    corrupt[len(corrupt) // 2] ^= 0xFF
    client.put_object(Bucket=BUCKET, Key="corrupt.pt2", Body=bytes(corrupt))

    url = f"sqlite:///{tmp_path / 'registry.db'}"
    engine = make_engine(url)
    upgrade(engine)
    writer = RegistryWriter(engine, actor="test")
    stored = writer.push_artifact(pushed)
    revision = RegistryReader(engine).revision()
    assert writer.push_artifact(pushed).sha256 == stored.sha256
    assert RegistryReader(engine).revision() == revision, "pushing again is a no-op: no new revision"
    digest = artifact_sha256(from_s3)
    for version, uri, sha in (
        ("s3", f"s3://{BUCKET}/mlp.pt2", digest),
        ("pushed", pushed_uri(stored.sha256), ""),
        ("corrupt", f"s3://{BUCKET}/corrupt.pt2", digest),
    ):
        writer.register_version(
            VersionSpec("mlp", version, uri, "torch_export", mlp.SCHEMA, sha256=sha, max_batch_size=8)
        )
        writer.place("mlp", version, "remote")

    data_dir = tmp_path / "node"  # empty: the node has never had any artifact
    common = CommonSettings(data_dir=data_dir, database_url=url)
    settings = node_settings(name="remote", use_registry=True, placement_refresh_s=0.2)
    node = ServiceThread(lambda stop, ready: serve_node(settings, common, stop, ready), "remote")
    address = node.start()
    try:
        stub = node_pb2_grpc.NodeStub(internal_channel(address))
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while True:
            versions = loaded(stub)
            states = {k: node_pb2.VersionState.Name(v.state) for k, v in versions.items()}
            if (
                states.get("mlp:s3") == states.get("mlp:pushed") == "VERSION_STATE_SERVING"
                and states.get("mlp:corrupt") == "VERSION_STATE_FAILED"
            ):
                break
            assert time.monotonic() < deadline, states
            time.sleep(0.2)
        reason = versions["mlp:corrupt"].reason
        assert "sha256" in reason and "refused" in reason and digest in reason, reason
        # Operators see it where they look: ferryman model list (from the node's heartbeat).
        env = {**os.environ, "FERRYMAN_DATABASE_URL": url, "FERRYMAN_DATA_DIR": str(tmp_path / "cli")}
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while True:
            listed = subprocess.run(
                [sys.executable, "-m", "ferryman_server.cli", "model", "list", "--json"],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            )
            by_version = {v["version"]: v for v in json.loads(listed.stdout)[0]["versions"]}
            if by_version["corrupt"]["status"] == "FAILED":
                break
            assert time.monotonic() < deadline, by_version["corrupt"]
            time.sleep(0.5)
        assert "refused" in by_version["corrupt"]["failed"]["remote"]
        assert by_version["s3"]["status"] != "FAILED" and not by_version["s3"]["failed"]
        x = np.ones((1, 512), np.float32)
        for version, seed in (("s3", 0), ("pushed", 1)):
            request = node_pb2.InferBatchRequest(
                model="mlp",
                version=version,
                items=[
                    node_pb2.BatchItem(
                        request_id=version, inputs=[common_pb2.NamedTensor(name="input", tensor=encode(x))]
                    )
                ],
            )
            answer = stub.InferBatch(request, metadata=service_metadata(), timeout=30)
            (item,) = answer.items
            assert item.status.code == 0, item.status
            with torch.no_grad():
                want = mlp.build_mlp(seed)(torch.from_numpy(x)).numpy()
            np.testing.assert_allclose(decode(item.outputs[0].tensor), want, rtol=1e-4, atol=1e-5)
        cached = sorted(p.name for p in (data_dir / "artifact-cache").iterdir())
        assert cached == sorted({digest, stored.sha256}), "one entry per digest, nothing left half-written"
    finally:
        node.stop()
        engine.dispose()
