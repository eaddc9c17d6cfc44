"""Overview: nodes and their health; QPS, p50/p99, error rate and batch fill per model;
tokens and spend per tenant."""

from __future__ import annotations

import math
import time

import pandas as pd
import streamlit as st

from admin_ui.context import Console
from ferryman.top import rows, scrape, tenant_usage


def render(ctx: Console) -> None:
    st.header("Overview")
    nodes = ctx.reader.nodes()
    ready = sum(1 for n in nodes if n.lifecycle == "READY")
    cols = st.columns(4)
    cols[0].metric("Nodes ready", f"{ready} / {len(nodes)}")
    cols[1].metric("Models", len(ctx.reader.models()))
    cols[2].metric("Tenants", len(ctx.reader.tenants()))
    cols[3].metric("Config revision", ctx.reader.revision())
    urls = ctx.settings.metrics()
    if not urls:
        st.info(
            "Set FERRYMAN_CONSOLE_METRICS_URLS to the routers' and batchers' /metrics URLs for live figures."
        )
        return
    try:
        now, samples = time.monotonic(), scrape(urls)
    except OSError as exc:
        st.warning(f"metrics unavailable: {exc}")
        return
    usage = tenant_usage(samples)
    if usage:
        st.subheader("Tokens and spend by tenant (since the services started)")
        st.dataframe(
            pd.DataFrame(
                [
                    {
                        "tenant": u.tenant,
                        "model": u.model,
                        "prompt tokens": int(u.input_tokens),
                        "generated tokens": int(u.output_tokens),
                        "spend USD": round(u.cost_usd, 6),
                    }
                    for u in usage
                ]
            ),
            hide_index=True,
            width="stretch",
        )
    previous = st.session_state.get("overview_scrape")
    st.session_state["overview_scrape"] = (now, samples)
    if previous is None or now - previous[0] <= 0:
        st.caption("Collecting: refresh in a few seconds for rates.")
        return
    model_rows = rows(previous[1], samples, now - previous[0])
    table = pd.DataFrame(
        [
            {
                "model": r.model,
                "req/s": round(r.qps, 2),
                "error rate": (r.errors_per_s / r.qps) if r.qps else 0.0,
                "p50 ms": None if math.isnan(r.p50_s) else round(r.p50_s * 1000, 1),
                "p99 ms": None if math.isnan(r.p99_s) else round(r.p99_s * 1000, 1),
                "batch fill": None if math.isnan(r.fill) else round(r.fill, 3),
            }
            for r in model_rows
        ]
    )
    st.dataframe(table, hide_index=True, width="stretch")
    if not table.empty:
        left, right = st.columns(2)
        left.bar_chart(table.set_index("model")["req/s"])
        right.bar_chart(table.set_index("model")["batch fill"].fillna(0))
    if st.button("Refresh", key="overview_refresh"):
        st.rerun()
