"""The platform as a user installs it. Both distributions are built from their source
distributions (``python -m build``: the sdist, then the wheel from it), installed into a
fresh virtual environment with every dependency the platform declares at the lowest version
it declares (its floors, so they are honest), with no checkout anywhere on the path. From
there ``ferryman up --nodes 1 --no-generate`` starts, its printed snippet predicts through
the installed SDK, the console (started by the installed platform with a clean environment)
answers its health page, and Ctrl-C stops everything. A handler author's code type-checks
against the installed platform (``py.typed``), and no bare room name is importable."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import tomllib
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from ferryman_server.kernel.net import free_port

# Left out of make test-fast: it builds both distributions and installs the platform.
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
INSTALL_TIMEOUT_S = 1200
UP_READY_TIMEOUT_S = 300
UP_STOP_TIMEOUT_S = 60
NOT_SOURCE = (
    ".git",
    ".venv",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".mypy_cache",
    ".ruff_cache",
    ".whl",
)
HANDLER = """
from collections.abc import Mapping
from pathlib import Path

import torch

from ferryman_server.gpu_node.handler import BatchInput, Handler, RuntimeOutput


class Doubler:
    def load(self, path: Path, device: torch.device) -> None:
        self.device = device

    def predict(self, inputs: Mapping[str, BatchInput], parameters: Mapping[str, str]) -> RuntimeOutput:
        rows = inputs["input"]
        assert isinstance(rows, torch.Tensor)
        return RuntimeOutput(outputs={"output": rows * 2})


handler: Handler = Doubler()
"""


def run(*command: str | Path, cwd: Path | None = None, timeout: float = INSTALL_TIMEOUT_S) -> str:
    done = subprocess.run(
        [str(c) for c in command], capture_output=True, text=True, timeout=timeout, cwd=cwd, check=False
    )
    assert done.returncode == 0, f"{command}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done.stdout


def floors() -> dict[str, str]:
    """The platform's dependencies at the lowest versions it declares: name -> version."""
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    found = {}
    for dependency in declared:
        lowest = re.search(r">=\s*([\w.]+)", dependency)
        if lowest:
            found[re.split(r"[<>=\[ ]", dependency, maxsplit=1)[0]] = lowest.group(1)
    return found


def build(source: Path, out: Path) -> tuple[Path, Path]:
    """The sdist, and the wheel built from it, with this environment's setuptools."""
    run(sys.executable, "-m", "build", "--no-isolation", "--outdir", out, source)
    return next(out.glob("*.tar.gz")), next(out.glob("*.whl"))


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with both distributions, built from their sdists,
    installed at the platform's floors; its python."""
    root = tmp_path_factory.mktemp("installed")
    source = root / "source"
    # The links of ferryman_server/ and sdk/ferryman are kept: the sdists must hold the files.
    shutil.copytree(REPO, source, symlinks=True, ignore=shutil.ignore_patterns(*NOT_SOURCE))
    sdk_sdist, sdk_wheel = build(source / "sdk", root / "sdk-dist")
    sdist, wheel = build(source, root / "dist")
    with tarfile.open(sdk_sdist) as tar:
        assert any(n.endswith("/ferryman/sdk/client.py") for n in tar.getnames())
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
        assert any(n.endswith("/ferryman_server/router/gateway.py") for n in names)
        assert any(
            n.endswith("/ferryman_server/registry/migrations/versions/0001_initial_schema.py") for n in names
        )
    pins = root / "floors.txt"
    pins.write_text("".join(f"{name}=={version}\n" for name, version in floors().items()))
    run(sys.executable, "-m", "venv", "--without-pip", root / "venv")
    python = root / "venv" / "bin" / "python"
    # This environment's pip installs into the new one (no download of pip itself).
    pip = (sys.executable, "-m", "pip", "--python", python)
    run(*pip, "install", "--quiet", "-c", REPO / "constraints.txt", "-c", pins, sdk_wheel, wheel)
    return python


def test_the_installed_platform_holds_its_floors_and_its_one_name(installed: Path, tmp_path: Path) -> None:
    run(sys.executable, "-m", "pip", "--python", installed, "check")
    listed = run(sys.executable, "-m", "pip", "--python", installed, "list", "--format", "json")
    versions = {p["name"].lower().replace("_", "-"): p["version"] for p in json.loads(listed)}
    for name, floor in floors().items():
        got = versions[name.lower().replace("_", "-")]
        assert got.split(".")[: len(floor.split("."))] == floor.split(".") or got == floor, (name, got, floor)
    where = run(
        installed, "-c", "import ferryman_server.router.gateway as g; print(g.__file__)", cwd=tmp_path
    )
    assert str(installed.parent.parent) in where and "site-packages" in where
    for bare in ("router", "registry", "gpu_node", "kernel", "cli"):
        imported = subprocess.run(
            [installed, "-c", f"import {bare}"], capture_output=True, text=True, cwd=tmp_path
        )
        assert f"No module named '{bare}'" in imported.stderr


def test_a_handler_type_checks_against_the_installed_platform(installed: Path, tmp_path: Path) -> None:
    handler = tmp_path / "doubler.py"
    handler.write_text(HANDLER)
    mypy = Path(sys.executable).parent / "mypy"
    checked = subprocess.run(
        [mypy, "--strict", "--python-executable", installed, "--no-incremental", handler],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
    )
    assert checked.returncode == 0, checked.stdout


def start_up(installed: Path, data: Path) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    """``ferryman up`` from the installed environment, with a clean environment: its bin on
    the path, its data in ``data``, nothing of this session's."""
    env = {
        "PATH": f"{installed.parent}:/usr/bin:/bin",
        "HOME": str(data),
        "FERRYMAN_DATA_DIR": str(data),
        "FERRYMAN_LOG_LEVEL": "WARNING",
    }
    command: list[str | Path] = [
        installed.parent / "ferryman",
        "up",
        "--json",
        "--nodes",
        "1",
        "--no-generate",
    ]
    command += ["--listen", f"127.0.0.1:{free_port()}", "--http-listen", f"127.0.0.1:{free_port()}"]
    proc = subprocess.Popen(command, env=env, cwd=data, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    lines: list[bytes] = []
    reader = threading.Thread(target=lambda: lines.append(proc.stdout.readline()) if proc.stdout else None)
    reader.start()
    reader.join(UP_READY_TIMEOUT_S)
    if not lines or not lines[0]:
        proc.kill()
        proc.wait()
        pytest.fail("the installed ferryman up printed nothing")
    return proc, json.loads(lines[0])


def test_the_installed_platform_runs_up_predicts_and_stops(installed: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    proc, info = start_up(installed, data)
    try:
        snippet = tmp_path / "snippet.py"
        snippet.write_text(info["snippet"])
        ran = subprocess.run(
            [installed, snippet],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
            env={"HOME": str(data)},
        )
        assert ran.returncode == 0, ran.stderr
        assert "(1, 384)" in ran.stdout
        with urllib.request.urlopen(f"{info['console_url']}/_stcore/health", timeout=10) as health:
            assert health.status == 200
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(UP_STOP_TIMEOUT_S)
    assert code == 0
    assert os.listdir(data), "its data stayed in its data directory"
