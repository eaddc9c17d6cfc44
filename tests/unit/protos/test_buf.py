"""protos/ passes `buf lint` (with the reasoned exceptions in protos/buf.yaml) and builds
on its own, as any language's toolchain would load it: nothing imported from outside but
protobuf's well-known types."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
BUF = Path(os.environ.get("FERRYMAN_TEST_BUF", REPO / ".venv" / "buf" / "node_modules" / ".bin" / "buf"))
BUF_TIMEOUT_S = 120


def buf(*args: str) -> subprocess.CompletedProcess[str]:
    if not BUF.exists():
        raise RuntimeError(f"{BUF} is missing: `make test` installs buf from the npm registry")
    return subprocess.run(
        [str(BUF), *args],
        cwd=REPO / "protos",
        capture_output=True,
        text=True,
        timeout=BUF_TIMEOUT_S,
        check=False,
    )


@pytest.mark.parametrize("command", [("lint",), ("build", "-o", os.devnull)])
def test_buf(command: tuple[str, ...]) -> None:
    done = buf(*command)
    assert done.returncode == 0, done.stdout + done.stderr
