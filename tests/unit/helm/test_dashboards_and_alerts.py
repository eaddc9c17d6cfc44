"""Dashboards and alert rules parse, and every PromQL expression names only catalog metrics."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from ferryman_server.kernel.metrics_catalog import series_names

CHART = Path(__file__).resolve().parents[3] / "helm" / "ferryman"
METRIC = re.compile(r"\bferryman_[a-z0-9_]+")
RECORDED = re.compile(r"\bferryman:[a-z0-9_:]+")


def dashboard_exprs(path: Path) -> list[str]:
    board = json.loads(path.read_text())
    assert board["uid"] and board["title"] and board["panels"]
    panels = [target["expr"] for panel in board["panels"] for target in panel["targets"]]
    return panels + [a["expr"] for a in board.get("annotations", {}).get("list", [])]


def test_dashboards_parse_and_use_catalog_metrics_only() -> None:
    boards = sorted((CHART / "dashboards").glob("*.json"))
    assert {b.stem for b in boards} >= {
        "ferryman-overview",
        "ferryman-batching",
        "ferryman-tenants",
        "ferryman-canary",
    }
    known = series_names()
    for board in boards:
        exprs = dashboard_exprs(board)
        assert exprs, board.name
        for expr in exprs:
            unknown = set(METRIC.findall(expr)) - known
            assert not unknown, f"{board.name}: {unknown} not in the catalog ({expr})"


def test_alert_rules_parse_and_use_catalog_metrics_only() -> None:
    rules = yaml.safe_load((CHART / "alerts" / "ferryman-rules.yaml").read_text())
    known = series_names()
    recorded = {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}
    alerts = [r for g in rules["groups"] for r in g["rules"] if "alert" in r]
    assert {a["alert"] for a in alerts} >= {
        "FerrymanLatencyBudgetBurn",
        "FerrymanErrorBudgetBurn",
        "FerrymanQueueSaturated",
        "FerrymanNodeDown",
        "FerrymanLatencyBudgetSlowBurn",
        "FerrymanErrorBudgetSlowBurn",
    }
    for group in rules["groups"]:
        for rule in group["rules"]:
            expr = rule["expr"]
            assert not set(METRIC.findall(expr)) - known, expr
            assert not set(RECORDED.findall(expr)) - recorded, expr
            if "alert" in rule:
                assert rule["labels"]["severity"] in ("page", "ticket") and rule["annotations"]["summary"]


CODE_MATCHER = re.compile(r'code(!~|!=|=~|=)"([^"]*)"')
FIXED_RANGE = re.compile(r"\[(\d+[smh])\]")


def test_the_canary_dashboard_marks_rollout_steps() -> None:
    board = json.loads((CHART / "dashboards" / "ferryman-canary.json").read_text())
    (steps,) = board["annotations"]["list"]
    assert "ferryman_rollout_events_total" in steps["expr"] and steps["enable"]
    titles = {panel["title"] for panel in board["panels"]}
    assert {"Rollout: candidate weight", "Shadow answers that differ from the live ones"} <= titles


REFUSED = ("=", "RESOURCE_EXHAUSTED")
"""The one other code matcher dashboards use: refusals (quota, overload, full queues), the
caller's code the error definition leaves out."""


def test_dashboards_count_errors_as_the_alert_rules_do() -> None:
    rules = yaml.safe_load((CHART / "alerts" / "ferryman-rules.yaml").read_text())
    error_ratio = next(
        r["expr"]
        for g in rules["groups"]
        for r in g["rules"]
        if r.get("record") == "ferryman:error_ratio:rate5m"
    )
    (slo,) = set(CODE_MATCHER.findall(error_ratio))
    assert REFUSED[1] in slo[1].split("|"), "a refusal is never counted as an error"
    for board in sorted((CHART / "dashboards").glob("*.json")):
        for expr in dashboard_exprs(board):
            for matcher in CODE_MATCHER.findall(expr):
                assert matcher in (slo, REFUSED), (
                    f"{board.name}: {matcher} is not the SLO's error definition {slo}"
                )
            # Ranges follow the scrape interval; only deliberate long windows are fixed.
            assert all(r.endswith("h") for r in FIXED_RANGE.findall(expr)), f"{board.name}: {expr}"
