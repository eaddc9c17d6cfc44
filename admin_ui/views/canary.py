"""The canary view: each version's share of traffic, error rate and p99 side by side over
time, with the route's changes and the rollout's steps marked where they happened."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import streamlit as st

from ferryman_server.admin_ui.context import Console
from ferryman_server.admin_ui.series.charts import Mark, Shown, Window, grid, range_picker

CHARTS = [
    Shown("canary", "Traffic share by version"),
    Shown("canary", "Error rate by version"),
    Shown("canary", "p99 latency by version"),
]


def describe(action: str, actor: str, detail: dict[str, Any]) -> str:
    targets = detail.get("targets")
    weights = (
        ", ".join(f"v{t['version']} {t['weight']}%" for t in targets) if isinstance(targets, list) else ""
    )
    return f"{action} by {actor}" + (f": {weights}" if weights else "")


def render(ctx: Console, model: str) -> None:
    if ctx.source is None:
        return
    st.subheader("Canary view")
    range_s = range_picker("canary_range")
    st.fragment(charts, run_every=ctx.settings.refresh_s)(ctx, model, range_s)


def charts(ctx: Console, model: str, range_s: float) -> None:
    assert ctx.source is not None
    window = Window.ending_now(range_s, ctx.settings.scrape_interval_s)
    since = datetime.fromtimestamp(window.start, UTC)
    marks = [
        Mark(
            e.created_at if e.created_at.tzinfo else e.created_at.replace(tzinfo=UTC),
            describe(e.action, e.actor, e.detail),
        )
        for e in ctx.reader.route_changes(model, since)
    ]
    grid(ctx.source, CHARTS, window, {"model": model}, key="canary", columns=len(CHARTS), marks=marks)
    if marks:
        st.caption("Dashed lines: " + "; ".join(f"{m.at:%H:%M:%S} {m.text}" for m in marks[:5]))
