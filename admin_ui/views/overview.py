"""Overview: is anything wrong right now; then requests, errors, latency, batching, queue
wait and coalescing per model over time (redrawn in place); tokens and spend per tenant."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from ferryman_server.admin_ui.context import Console
from ferryman_server.admin_ui.series.charts import Shown, Window, grid, label, range_picker
from ferryman_server.admin_ui.views import wrong
from ferryman_server.kernel.scrape import scrape, tenant_usage

CHARTS = [
    Shown("overview", "Requests per second by model"),
    Shown("overview", "Error rate by model"),
    Shown("overview", "Latency p50 / p99"),
    Shown("overview", "Batch fill ratio (mean) by model"),
    Shown("batching", "Mean batch size by version"),
    Shown("batching", "Queue wait p50 / p99"),
    Shown("batching", "Coalesced and cache hits"),
    Shown("overview", "Shed requests by reason"),
    # Generations, judged by their first token and their pace, not their whole streams.
    Shown("overview", "Time to first token p50 / p99"),
    Shown("overview", "Time per output token p50 / p99"),
    Shown("overview", "Generated tokens per second by model"),
    Shown("overview", "Generations running and waiting"),
    Shown("overview", "KV cache slots and preemptions"),
]


def render(ctx: Console) -> None:
    st.header("Overview")
    st.fragment(live, run_every=ctx.settings.refresh_s)(ctx)
    if ctx.source is None:
        st.info(
            "Set FERRYMAN_CONSOLE_PROMETHEUS_URL, or FERRYMAN_CONSOLE_METRICS_URLS to the routers' and "
            "batchers' /metrics URLs, for charts."
        )
        return
    range_s = range_picker("overview_range")
    st.fragment(charts, run_every=ctx.settings.refresh_s)(ctx, range_s)
    usage(ctx)


def live(ctx: Console) -> None:
    """The figures and problems of this moment."""
    nodes = ctx.reader.nodes()
    ready = sum(1 for n in nodes if n.lifecycle == "READY")
    cols = st.columns(4)
    cols[0].metric("Nodes ready", f"{ready} / {len(nodes)}")
    cols[1].metric("Models", len(ctx.reader.models()))
    cols[2].metric("Tenants", len(ctx.reader.tenants()))
    cols[3].metric("Config revision", ctx.reader.revision())
    try:
        found = wrong.problems(wrong.gather(ctx))
    except OSError as exc:
        st.warning(f"metrics unavailable: {exc}")
        return
    if not found:
        st.success("Nothing wrong right now.", icon=":material/check_circle:")
        return
    st.error("\n".join(f"- **{p.what}**: {p.detail}" for p in found), icon=":material/error:")


def charts(ctx: Console, range_s: float) -> None:
    assert ctx.source is not None
    window = Window.ending_now(range_s, ctx.settings.scrape_interval_s)
    st.caption(
        f"The last {label(range_s)} from {ctx.source.name}; redrawn every {ctx.settings.refresh_s:g} s."
    )
    grid(ctx.source, CHARTS, window, {}, key="overview")


def usage(ctx: Console) -> None:
    urls = ctx.settings.metrics()
    if not urls:
        return
    try:
        samples = scrape(urls)
    except OSError as exc:
        st.warning(f"metrics unavailable: {exc}")
        return
    rows = tenant_usage(samples)
    if not rows:
        return
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
                for u in rows
            ]
        ),
        hide_index=True,
        width="stretch",
    )
