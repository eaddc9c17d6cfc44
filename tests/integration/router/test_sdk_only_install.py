"""``pip install ferryman`` is the client SDK alone: installed into a fresh virtual
environment it brings grpcio, protobuf and numpy (no torch, streamlit or sqlmodel) and
predicts against a running platform; the ``ferryman`` command there says what to install."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from router_platform import E2E

REPO = Path(__file__).resolve().parents[3]
INSTALL_TIMEOUT_S = 600
NOT_SOURCE = (
    ".git",
    ".venv",
    "build",
    "*.egg-info",
    "__pycache__",
    ".mypy_cache",
    ".ruff_cache",
    "node_modules",
)
PLATFORM_ONLY = ("torch", "streamlit", "sqlmodel", "alembic", "redis", "grpcio-tools", "typer")
SNIPPET = """
import sys
import numpy as np
import ferryman

with ferryman.Client(sys.argv[1], api_key=sys.argv[2]) as client:
    answer = client.predict("mlp", np.ones((2, 512), np.float32))
print(answer.version, answer.outputs["output"].shape)
"""


def run(*command: str | Path, timeout: float = INSTALL_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in command], capture_output=True, text=True, timeout=timeout)


def test_the_sdk_installs_alone_and_predicts(e2e: E2E, tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    # Built from a copy (setuptools writes build/ beside the sources) with this
    # environment's setuptools (no download of a build backend).
    source = tmp_path / "source"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(*NOT_SOURCE))
    built = run(
        sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", wheels, source
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("ferryman-*.whl")
    venv = tmp_path / "sdk-venv"
    made = run(sys.executable, "-m", "venv", "--without-pip", venv)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    # This environment's pip installs into the new one: no network for pip itself.
    installed = run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        python,
        "install",
        "--constraint",
        REPO / "constraints.txt",
        wheel,
    )
    assert installed.returncode == 0, installed.stderr
    listed = run(sys.executable, "-m", "pip", "--python", python, "list", "--format", "freeze")
    names = {line.split("==")[0].lower() for line in listed.stdout.splitlines()}
    assert {"ferryman", "grpcio", "protobuf", "numpy"} <= names
    assert not names & set(PLATFORM_ONLY), f"the SDK pulled in {sorted(names & set(PLATFORM_ONLY))}"

    answered = run(python, "-c", SNIPPET, e2e.router, e2e.keys["acme"], timeout=60)
    assert answered.returncode == 0, answered.stderr
    version, shape = answered.stdout.split(maxsplit=1)
    assert version in {"1", "2"} and shape.strip() == "(2, 10)"

    cli = run(venv / "bin" / "ferryman", "models", "list", timeout=60)
    assert cli.returncode == 1
    assert "pip install 'ferryman[server]'" in cli.stderr and "Traceback" not in cli.stderr
