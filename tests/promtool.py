"""Prometheus's own promtool (Debian's ``prometheus`` package; .ci/run installs it)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

PROMTOOL_TIMEOUT_S = 120


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    if binary is None:
        raise RuntimeError("promtool is missing: apt-get install prometheus (.ci/run does)")
    return subprocess.run(
        [binary, *args], cwd=cwd, capture_output=True, text=True, timeout=PROMTOOL_TIMEOUT_S, check=False
    )
