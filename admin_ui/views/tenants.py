"""Tenants: create, edit tier and priority, issue keys (shown once), revoke keys."""

from __future__ import annotations

import streamlit as st

from ferryman.priorities import PRIORITIES
from ferryman_server.admin_ui.context import Console
from ferryman_server.registry.accounts import Permission
from ferryman_server.registry.validation import RegistryError


def render(ctx: Console) -> None:
    st.header("Tenants")
    tenants = ctx.reader.tenants()
    st.dataframe(
        [
            {
                "name": t.name,
                "tier": t.tier,
                "priority": t.priority,
                "models": ", ".join(t.allowed_models) or "all",
                "disabled": t.disabled,
                "keys": " ".join(t.active_keys),
            }
            for t in tenants
        ],
        width="stretch",
        hide_index=True,
    )
    if key := st.session_state.pop("new_key", None):
        st.success("New API key: copy it now, it is shown only once.")
        st.code(key, language=None)
    if not ctx.can(Permission.MANAGE):
        return
    left, right = st.columns(2)
    with left, st.form("create_tenant", clear_on_submit=True):
        st.subheader("Create a tenant")
        name = st.text_input("Name", key="tenant_name")
        tier = st.text_input("Tier", value="standard", key="tenant_tier")
        priority = st.selectbox(
            "Default priority",
            list(PRIORITIES),
            index=list(PRIORITIES).index("normal"),
            key="tenant_priority",
        )
        if st.form_submit_button("Create", key="create_submit"):
            try:
                st.session_state["new_key"] = (
                    ctx.writer(Permission.MANAGE)
                    .create_tenant(name.strip(), tier=tier, priority=PRIORITIES[priority])
                    .plaintext
                )
                st.rerun()
            except RegistryError as exc:
                st.error(str(exc))
    if not tenants:
        return
    with right:
        st.subheader("Edit a tenant")
        chosen = st.selectbox("Tenant", [t.name for t in tenants], key="edit_tenant")
        tenant = next(t for t in tenants if t.name == chosen)
        with st.form("edit_tenant_form"):
            tier = st.text_input("Tier", value=tenant.tier, key="edit_tier")
            priority = st.selectbox(
                "Default priority",
                list(PRIORITIES),
                index=list(PRIORITIES.values()).index(tenant.priority),
                key="edit_prio",
            )
            disabled = st.checkbox("Disabled", value=tenant.disabled, key="edit_disabled")
            if st.form_submit_button("Save", key="edit_submit"):
                try:
                    ctx.writer(Permission.MANAGE).update_tenant(
                        chosen, tier=tier, priority=PRIORITIES[priority], disabled=disabled
                    )
                    st.success(f"{chosen} saved")
                except RegistryError as exc:
                    st.error(str(exc))
        if st.button("Issue a new key", key="issue_key"):
            try:
                st.session_state["new_key"] = ctx.writer(Permission.MANAGE).issue_key(chosen).plaintext
                st.rerun()
            except RegistryError as exc:
                st.error(str(exc))
        if tenant.active_keys:
            prefix = st.selectbox("Key", tenant.active_keys, key="revoke_prefix")
            if st.button("Revoke key", key="revoke_key", type="primary"):
                try:
                    ctx.writer(Permission.MANAGE).revoke_key(prefix)
                    st.success(f"key {prefix} revoked")
                    st.rerun()
                except RegistryError as exc:
                    st.error(str(exc))
