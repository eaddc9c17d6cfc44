"""Quotas: edit a tenant's limits and mode; live usage against each limit."""

from __future__ import annotations

import grpc
import streamlit as st

from ferryman.v1 import quota_pb2, quota_pb2_grpc
from ferryman_server.admin_ui.context import Console
from ferryman_server.admin_ui.views import tenant_charts
from ferryman_server.kernel.security import sync_channel
from ferryman_server.registry.accounts import Permission
from ferryman_server.registry.specs import QuotaLimits
from ferryman_server.registry.tables import QuotaPolicy
from ferryman_server.registry.validation import RegistryError

USAGE_TIMEOUT_S = 2.0


def _count(value: float) -> int | None:
    return int(value) if value > 0 else None


def _dollars(value: float) -> float | None:
    return float(value) if value > 0 else None


def usage(ctx: Console, tenant: str) -> None:
    if not ctx.settings.quota_address:
        st.info("Set FERRYMAN_CONSOLE_QUOTA_ADDRESS to a router (or quota server) to see live usage.")
        return
    try:
        with sync_channel(ctx.settings.quota_address, ctx.security) as channel:
            response = quota_pb2_grpc.QuotaStub(channel).GetUsage(
                quota_pb2.GetUsageRequest(tenant=tenant),
                timeout=USAGE_TIMEOUT_S,
                metadata=ctx.security.metadata(),
            )
    except grpc.RpcError as exc:
        st.warning(f"usage unavailable: {exc.code().name}")
        return
    for limit in response.limits:
        share = min(1.0, limit.current / limit.maximum) if limit.maximum else 0.0
        st.progress(share, text=f"{limit.limit}: {limit.current:g} of {limit.maximum:g} ({limit.mode})")
    st.caption(f"expired reservations: {response.expired_reservations}")


def render(ctx: Console) -> None:
    st.header("Quotas")
    tenants = [t.name for t in ctx.reader.tenants()]
    if not tenants:
        st.info("No tenants yet.")
        return
    tenant = st.selectbox("Tenant", tenants, key="quota_tenant")
    policies = ctx.reader.quota_policies(tenant)
    if policies:
        st.dataframe([p.model_dump(exclude={"id", "tenant_id"}) for p in policies], hide_index=True)
    current = next((p for p in policies if p.model == ""), None)
    if ctx.can(Permission.OPERATE):
        limits_form(ctx, tenant, current)
    st.subheader("Usage now")
    usage(ctx, tenant)
    tenant_charts.render(ctx, tenant, current)


def limits_form(ctx: Console, tenant: str, current: QuotaPolicy | None) -> None:
    with st.form("quota_form"):
        st.caption("0 means unlimited.")
        cols = st.columns(3)
        rpm = cols[0].number_input(
            "Requests / minute", min_value=0, value=(current.rpm or 0) if current else 0, key="q_rpm"
        )
        tpm = cols[1].number_input(
            "Tokens / minute", min_value=0, value=(current.tpm or 0) if current else 0, key="q_tpm"
        )
        cost = cols[2].number_input(
            "Cost / day (USD)",
            min_value=0.0,
            value=float(current.cost_per_day_usd or 0) if current else 0.0,
            key="q_cost",
        )
        burst = cols[0].number_input(
            "Burst", min_value=0, value=(current.burst or 0) if current else 0, key="q_burst"
        )
        concurrency = cols[1].number_input(
            "Max concurrency",
            min_value=0,
            value=(current.max_concurrency or 0) if current else 0,
            key="q_conc",
        )
        mode = cols[2].radio(
            "Mode",
            ["hard", "soft"],
            index=0 if not current or current.mode == "hard" else 1,
            key="q_mode",
            horizontal=True,
        )
        if st.form_submit_button("Save limits", key="quota_submit"):
            limits = QuotaLimits(
                rpm=_count(rpm),
                tpm=_count(tpm),
                cost_per_day_usd=_dollars(cost),
                burst=_count(burst),
                max_concurrency=_count(concurrency),
                mode=str(mode),
            )
            try:
                ctx.writer(Permission.OPERATE).set_quota(tenant, limits)
                st.success(f"limits of {tenant} saved")
            except RegistryError as exc:
                st.error(str(exc))
