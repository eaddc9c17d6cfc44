"""Test models and node settings shared by node, batcher and end-to-end tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ferryman.v1 import node_pb2
from ferryman_server.gpu_node.demo import echo, minilm, mlp
from ferryman_server.gpu_node.settings import NodeSettings
from ferryman_server.kernel.artifacts import artifact_sha256
from ferryman_server.kernel.schema import IOSchema

POISON = -999.0


@dataclass(frozen=True)
class Artifacts:
    mlp_export: Path
    mlp_script: Path
    minilm_dir: Path
    echo_poison: Path
    echo_oom: Path


def build_artifacts(root: Path) -> Artifacts:
    """Every test artifact, built locally under ``root``."""
    return Artifacts(
        mlp_export=mlp.export_mlp(root / "mlp.pt2"),
        mlp_script=mlp.script_mlp(root / "mlp.pt"),
        minilm_dir=minilm.build_artifact(root / "minilm"),
        echo_poison=echo.write_config(root / "echo-poison.json", poison=POISON),
        echo_oom=echo.write_config(root / "echo-oom.json", oom_above_rows=4),
    )


def spec(
    model: str,
    version: str,
    path: Path,
    fmt: str,
    schema: Mapping[str, Any],
    *,
    handler: str = "",
    max_batch_size: int = 32,
    sha256: str | None = None,
) -> node_pb2.ModelVersionSpec:
    return node_pb2.ModelVersionSpec(
        model=model,
        version=version,
        artifact_uri=str(path),
        sha256=artifact_sha256(path) if sha256 is None else sha256,
        format=fmt,
        handler=handler,
        schema=IOSchema.model_validate(schema).to_proto(),
        max_batch_size=max_batch_size,
    )


def node_settings(**overrides: object) -> NodeSettings:
    base: dict[str, object] = {
        "listen": "127.0.0.1:0",
        "name": "test-node",
        "device": "cpu",
        "use_registry": False,
        "warmup_runs": 1,
    }
    return NodeSettings(**{**base, **overrides})  # type: ignore[arg-type]


def node_subprocess(
    name: str, address: str, database_url: str, data_dir: Path, stderr: int = subprocess.DEVNULL
) -> subprocess.Popen[bytes]:
    """``ferryman serve node`` as its own process (for kill -9 and SIGTERM), registered in the
    registry at ``database_url`` with a fast heartbeat and a one-run warm-up."""
    env = {
        **os.environ,
        "FERRYMAN_DATABASE_URL": database_url,
        "FERRYMAN_DATA_DIR": str(data_dir),
        "FERRYMAN_NODE_HEARTBEAT_INTERVAL_S": "0.2",
        "FERRYMAN_NODE_WARMUP_RUNS": "1",
        "FERRYMAN_LOG_LEVEL": "WARNING",
    }
    args = ["serve", "node", "--listen", address, "--name", name, "--device", "cpu"]
    return subprocess.Popen(
        [sys.executable, "-m", "ferryman_server.cli", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
    )
