"""The shipped alert rules, checked and unit-tested by Prometheus's own promtool (Debian's
`prometheus` package; .ci/run installs it): a node dying among several, fast and slow burns
of the error and latency budgets, and no alert for the callers' own failures."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
RULES = HERE.parents[2] / "helm" / "ferryman" / "alerts" / "ferryman-rules.yaml"
PROMTOOL_TIMEOUT_S = 120


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    if binary is None:
        raise RuntimeError("promtool is missing: apt-get install prometheus (.ci/run does)")
    return subprocess.run(
        [binary, *args],
        cwd=HERE / "alerts",
        capture_output=True,
        text=True,
        timeout=PROMTOOL_TIMEOUT_S,
        check=False,
    )


def test_rules_pass_promtool_check() -> None:
    done = promtool("check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr


def test_rules_pass_their_unit_tests() -> None:
    done = promtool("test", "rules", "ferryman-rules.test.yaml")
    assert done.returncode == 0, done.stdout + done.stderr
