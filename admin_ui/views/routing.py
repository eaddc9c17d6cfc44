"""Routing: weights per version (summing to 100), stickiness, fallback; promote and roll back;
the model's rollout."""

from __future__ import annotations

import math

import streamlit as st

from ferryman_server.admin_ui.context import Console
from ferryman_server.admin_ui.views import canary, rollouts
from ferryman_server.kernel.scrape import latency_buckets, quantile, scrape, totals
from ferryman_server.registry.accounts import Permission
from ferryman_server.registry.reader import RouteView
from ferryman_server.registry.validation import RegistryError

STICKY = ["none", "tenant", "user"]


def version_health(ctx: Console, model: str) -> dict[str, tuple[float, float]]:
    """version -> (error share, p99 seconds) from the routers' metrics since start."""
    urls = ctx.settings.metrics()
    if not urls:
        return {}
    try:
        samples = scrape(urls)
    except OSError:
        return {}
    where = {"model": model}
    total = totals(samples, "ferryman_requests_total", by="version", where=where)
    good = totals(samples, "ferryman_requests_total", by="version", code="OK", where=where)
    buckets = latency_buckets(samples, by="version", where=where)
    return {
        v: ((n - good.get(v, 0.0)) / n if n else 0.0, quantile(buckets.get(v, {}), 0.99))
        for v, n in total.items()
    }


def _saved(model: str, message: str) -> None:
    """Show ``message`` after a rerun, with the sliders re-read from the registry."""
    for key in [k for k in st.session_state if str(k).startswith(f"weight_{model}_")]:
        del st.session_state[key]
    st.session_state["route_flash"] = message
    st.rerun()


def render(ctx: Console) -> None:
    st.header("Routing")
    if message := st.session_state.pop("route_flash", None):
        st.success(message)
    models = [m.name for m in ctx.reader.models()]
    if not models:
        st.info("No models yet.")
        return
    model = st.selectbox("Model", models, key="route_model")
    route = ctx.reader.route(model)
    versions = [v.version for v in ctx.reader.versions(model) if v.status != "RETIRED"]
    current = dict(route.targets) if route else {}
    canary.render(ctx, model)
    if rollouts.running(ctx, model):
        # Its weights move with the rollout: the route is not the operator's to set meanwhile.
        rollouts.render(ctx, model, route, versions)
        if route:
            st.caption("current: " + ", ".join(f"v{v} {w}%" for v, w in route.targets))
        return
    health = version_health(ctx, model)
    if not ctx.can(Permission.OPERATE):
        read_only(route, versions, health)
        rollouts.render(ctx, model, route, versions)
        return
    with st.form("route_form"):
        weights = {}
        for version in versions:
            error_share, p99 = health.get(version, (math.nan, math.nan))
            live = "" if math.isnan(error_share) else f" — errors {error_share:.1%}, p99 {p99 * 1000:.0f} ms"
            weights[version] = st.slider(
                f"v{version}{live}", 0, 100, int(current.get(version, 0)), key=f"weight_{model}_{version}"
            )
        sticky = st.selectbox(
            "Sticky by", STICKY, index=STICKY.index(route.sticky) if route else 0, key="route_sticky"
        )
        others = ["", *(m for m in models if m != model)]
        fallback = st.selectbox(
            "Fallback model",
            others,
            index=others.index(route.fallback) if route and route.fallback in others else 0,
            format_func=lambda name: name or "(none)",
            key="route_fallback",
        )
        if st.form_submit_button("Apply", key="route_apply"):
            apply(ctx, model, {v: w for v, w in weights.items() if w or v in current}, sticky, fallback)
    if route:
        st.caption("current: " + ", ".join(f"v{v} {w}%" for v, w in route.targets))
        candidate = min((t for t in route.targets if 0 < t[1] < 100), key=lambda t: t[1], default=None)
        cols = st.columns(2)
        if candidate and cols[0].button(f"Promote v{candidate[0]} to 100%", key="promote"):
            apply(
                ctx,
                model,
                {v: (100 if v == candidate[0] else 0) for v, _ in route.targets},
                route.sticky,
                route.fallback,
            )
        if route.previous_targets and cols[1].button("Roll back to the previous weights", key="rollback"):
            try:
                ctx.writer(Permission.OPERATE).rollback_route(model)
            except RegistryError as exc:
                st.error(str(exc))
                return
            _saved(model, "rolled back to the previous weights")
    rollouts.render(ctx, model, route, versions)


def read_only(route: RouteView | None, versions: list[str], health: dict[str, tuple[float, float]]) -> None:
    """The weights as they are, for those who may look but not change them."""
    current = dict(route.targets) if route else {}
    st.dataframe(
        [
            {
                "version": f"v{version}",
                "weight %": current.get(version, 0),
                "errors": health[version][0] if version in health else None,
                "p99 ms": round(health[version][1] * 1000, 1) if version in health else None,
            }
            for version in versions
        ],
        hide_index=True,
    )
    if route:
        st.caption(f"sticky by {route.sticky}; fallback {route.fallback or '(none)'}")


def apply(ctx: Console, model: str, weights: dict[str, int], sticky: str, fallback: str) -> None:
    try:
        ctx.writer(Permission.OPERATE).set_route(model, weights, sticky=sticky, fallback=fallback)
    except RegistryError as exc:
        st.error(str(exc))
        return
    _saved(model, "route saved; routers pick it up within a second")
