"""The shipped alert rules, checked and unit-tested by Prometheus's own promtool (Debian's
`prometheus` package; .ci/run installs it): a node dying among several, fast and slow burns
of the error and latency budgets, and no alert for the callers' own failures."""

from __future__ import annotations

from pathlib import Path

from promtool import promtool

HERE = Path(__file__).resolve().parent
RULES = HERE.parents[2] / "helm" / "ferryman" / "alerts" / "ferryman-rules.yaml"


def test_rules_pass_promtool_check() -> None:
    done = promtool("check", "rules", str(RULES), cwd=HERE / "alerts")
    assert done.returncode == 0, done.stdout + done.stderr


def test_rules_pass_their_unit_tests() -> None:
    done = promtool("test", "rules", "ferryman-rules.test.yaml", cwd=HERE / "alerts")
    assert done.returncode == 0, done.stdout + done.stderr
