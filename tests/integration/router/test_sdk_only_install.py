"""Two distributions: ``pip install ferryman`` is the client SDK alone (its wheel holds the
``ferryman`` package and nothing else; installed into a fresh virtual environment it brings
grpcio, protobuf and numpy, no torch, streamlit or sqlmodel, and predicts against a running
platform), and the platform's wheel installs one import name, ``ferryman_server``, with its
rooms under it, so no bare ``router`` or ``registry`` lands in site-packages."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from router_platform import E2E

# Left out of make test-fast: it builds both wheels and a virtual environment.
pytestmark = pytest.mark.slow

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


BESIDE = ("tritonclient[grpc]", "openai", "grpcio-tools")
"""What a tenant app has installed beside the SDK (each resolved with it, unpinned)."""


def run(*command: str | Path, timeout: float = INSTALL_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in command], capture_output=True, text=True, timeout=timeout)


def build_wheels(tmp_path: Path) -> dict[str, Path]:
    """Both wheels, built from a copy (setuptools writes build/ beside the sources) with this
    environment's setuptools (no download of a build backend): distribution name -> wheel."""
    wheels = tmp_path / "wheels"
    source = tmp_path / "source"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(*NOT_SOURCE))
    built = run(
        *(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", wheels),
        *(source / "sdk", source),
    )
    assert built.returncode == 0, built.stderr
    return {w.name.split("-")[0]: w for w in wheels.glob("*.whl")}


def top_level(wheel: Path) -> set[str]:
    return {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}


def test_each_wheel_holds_only_its_own_import_names(tmp_path: Path) -> None:
    wheels = build_wheels(tmp_path)
    assert set(wheels) == {"ferryman", "ferryman_server"}
    assert top_level(wheels["ferryman"]) == {"ferryman", "ferryman-0.1.0.dist-info"}
    sdk_files = zipfile.ZipFile(wheels["ferryman"]).namelist()
    assert "ferryman/sdk/client.py" in sdk_files and "ferryman/v1/inference_pb2.py" in sdk_files
    assert top_level(wheels["ferryman_server"]) == {"ferryman_server", "ferryman_server-0.1.0.dist-info"}
    platform_files = zipfile.ZipFile(wheels["ferryman_server"]).namelist()
    assert "ferryman_server/router/gateway.py" in platform_files
    assert "ferryman_server/router/doors/openai/chat/routes.py" in platform_files
    assert "ferryman_server/registry/migrations/versions/0001_initial_schema.py" in platform_files
    assert "ferryman_server/py.typed" in platform_files
    assert not [n for n in platform_files if n.startswith("ferryman_server/ferryman/")]


def install(venv: Path, *what: str | Path) -> Path:
    """A fresh virtual environment at ``venv`` with ``what`` installed; its python."""
    made = run(sys.executable, "-m", "venv", "--without-pip", venv)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    # This environment's pip installs into the new one: no network for pip itself.
    pip = (sys.executable, "-m", "pip", "--python", python)
    installed = run(*pip, "install", "--constraint", REPO / "constraints.txt", *what)
    assert installed.returncode == 0, installed.stderr
    return python


def sdk_floors() -> list[str]:
    """The SDK's dependencies at the lowest versions it declares (``name==floor``)."""
    declared = tomllib.loads((REPO / "sdk" / "pyproject.toml").read_text())["project"]["dependencies"]
    return [f"{d.split('>=')[0]}=={d.split('>=')[1].split(',')[0]}" for d in declared]


def test_the_sdk_installs_alone_and_predicts(e2e: E2E, tmp_path: Path) -> None:
    wheel = build_wheels(tmp_path)["ferryman"]
    venv = tmp_path / "sdk-venv"
    python = install(venv, wheel)
    listed = run(sys.executable, "-m", "pip", "--python", python, "list", "--format", "freeze")
    names = {line.split("==")[0].lower() for line in listed.stdout.splitlines()}
    assert {"ferryman", "grpcio", "protobuf", "numpy"} <= names
    assert not names & set(PLATFORM_ONLY), f"the SDK pulled in {sorted(names & set(PLATFORM_ONLY))}"

    answered = run(python, "-c", SNIPPET, e2e.router, e2e.keys["acme"], timeout=60)
    assert answered.returncode == 0, answered.stderr
    version, shape = answered.stdout.split(maxsplit=1)
    assert version in {"1", "2"} and shape.strip() == "(2, 10)"

    # The command is the platform's: an SDK-only environment has none to shadow anything.
    assert not (venv / "bin" / "ferryman").exists()
    # As an app runs: away from the checkout (whose folders `python -c` would find in its
    # working directory).
    platform = subprocess.run(
        [python, "-c", "import router"], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert "No module named 'router'" in platform.stderr


def test_the_sdk_at_its_floors_installs_beside_the_usual_clients(e2e: E2E, tmp_path: Path) -> None:
    """``pip install ferryman 'tritonclient[grpc]' openai grpcio-tools`` with the SDK's
    dependencies at their lowest declared versions: pip check is clean, and the SDK imports
    (its stubs accept that runtime) and predicts; tritonclient imports beside it."""
    wheel = build_wheels(tmp_path)["ferryman"]
    floors = tmp_path / "floors.txt"
    floors.write_text("\n".join(sdk_floors()) + "\n")
    python = install(tmp_path / "app-venv", "--constraint", floors, wheel, *BESIDE)
    checked = run(sys.executable, "-m", "pip", "--python", python, "check")
    assert checked.returncode == 0, checked.stdout
    listed = run(sys.executable, "-m", "pip", "--python", python, "list", "--format", "freeze")
    versions = dict(line.split("==") for line in listed.stdout.splitlines() if "==" in line)
    for floor in sdk_floors():
        name, version = floor.split("==")
        assert versions[name] == version, f"{name} {versions[name]}, not the floor {version}"
    assert "tritonclient" in versions and "openai" in versions

    app = SNIPPET + "import tritonclient.grpc, openai\n"
    # As an app runs: away from the checkout.
    answered = subprocess.run(
        [python, "-c", app, e2e.router, e2e.keys["acme"]],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert answered.returncode == 0, answered.stderr
    assert answered.stdout.split()[-1] == "10)"
