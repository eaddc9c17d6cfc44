"""A tenant's usage over time against each of its limits, and its spend per day."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import altair as alt
import pandas as pd
import streamlit as st

from ferryman_server.admin_ui.context import Console
from ferryman_server.admin_ui.series.charts import Shown, Window, expression, grid, panel, range_picker
from ferryman_server.registry.tables import QuotaPolicy

DAYS = 7
SECONDS_PER_MINUTE = 60.0


def render(ctx: Console, tenant: str, policy: QuotaPolicy | None) -> None:
    if ctx.source is None:
        st.info("Set FERRYMAN_CONSOLE_PROMETHEUS_URL or FERRYMAN_CONSOLE_METRICS_URLS for usage over time.")
        return
    st.subheader("Usage over time")
    range_s = range_picker("quota_range")
    st.fragment(charts, run_every=ctx.settings.refresh_s)(ctx, tenant, policy, range_s)
    spend_per_day(ctx, tenant)


def charts(ctx: Console, tenant: str, policy: QuotaPolicy | None, range_s: float) -> None:
    assert ctx.source is not None
    window = Window.ending_now(range_s, ctx.settings.scrape_interval_s)
    rpm, tpm, cost = (policy.rpm, policy.tpm, policy.cost_per_day_usd) if policy else (None, None, None)
    shown = [
        Shown(
            "tenants",
            "Requests per second by tenant",
            {"limit (rpm / 60)": rpm / SECONDS_PER_MINUTE} if rpm else {},
        ),
        Shown(
            "tenants", "Tokens per minute by tenant (quota tpm)", {"limit (tpm)": float(tpm)} if tpm else {}
        ),
        Shown(
            "tenants",
            "Spend today by tenant (quota cost per day)",
            {"limit (cost per day)": cost} if cost else {},
        ),
        Shown("tenants", "Refusals by tenant"),
    ]
    grid(ctx.source, shown, window, {"tenant": tenant}, key="tenant_chart")


def spend_per_day(ctx: Console, tenant: str) -> None:
    """The tenants dashboard's 'spend today' at the end of each of the last days (UTC)."""
    assert ctx.source is not None
    (expr, _), *_ = panel("tenants", "Spend today by tenant (quota cost per day)").targets
    now = time.time()
    today = datetime.fromtimestamp(now, UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    rows = []
    for back in range(DAYS):
        day = today - timedelta(days=back)
        at = min(now, (day + timedelta(days=1)).timestamp() - 1)
        window = Window(
            end=at, range_s=timedelta(days=1).total_seconds(), scrape_s=ctx.settings.scrape_interval_s
        )
        try:
            found = ctx.source.query(expression(expr, {"tenant": tenant}, window), at)
        except OSError as exc:
            st.warning(f"spend per day: {exc}")
            return
        rows.append({"day": day.date().isoformat(), "USD": sum(found.values())})
    chart = (
        alt.Chart(pd.DataFrame(rows[::-1]))
        .mark_bar()
        .encode(x=alt.X("day:N", title=None), y=alt.Y("USD:Q", title="USD"), tooltip=["day:N", "USD:Q"])
        .properties(title=f"Spend per day, last {DAYS} days (UTC)", height=180)
    )
    st.altair_chart(chart, use_container_width=True)
    st.caption("Days before the data source's history show 0: the console's own scrapes keep a day at most.")
