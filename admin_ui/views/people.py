"""People: console accounts and their roles (admins only)."""

from __future__ import annotations

import streamlit as st

from ferryman_server.admin_ui.auth import MAX_NAME_CHARS, MAX_PASSWORD_CHARS, hash_password
from ferryman_server.admin_ui.context import Console
from ferryman_server.registry.accounts import Permission, Role
from ferryman_server.registry.validation import RegistryError

MIN_PASSWORD_LENGTH = 8
ROLES = [r.value for r in Role]


def render(ctx: Console) -> None:
    st.header("People")
    ctx.require(Permission.MANAGE)
    if message := st.session_state.pop("people_flash", None):
        st.success(message)
    accounts = ctx.reader.accounts()
    st.dataframe(
        [{"name": a.name, "role": a.role, "since": a.created_at} for a in accounts],
        hide_index=True,
        width="stretch",
    )
    st.caption(
        "viewer: looks only; operator: also routes, rollouts, quotas, node drains and jobs; "
        "admin: also people, tenants, keys and models. "
        "`admin` logs in with the platform's admin password while no account has that name."
    )
    left, right = st.columns(2)
    with left, st.form("person_form", clear_on_submit=True):
        st.subheader("Add a person, or set a new password")
        name = st.text_input("Name", key="person_name", max_chars=MAX_NAME_CHARS)
        role = st.selectbox("Role", ROLES, key="person_role")
        password = st.text_input(
            "Password", type="password", key="person_password", max_chars=MAX_PASSWORD_CHARS
        )
        if st.form_submit_button("Save", key="person_submit"):
            if len(password) < MIN_PASSWORD_LENGTH:
                st.error(f"a password needs at least {MIN_PASSWORD_LENGTH} characters")
            else:
                save(
                    ctx,
                    lambda: ctx.writer(Permission.MANAGE).save_account(
                        name.strip(), role, hash_password(password)
                    ),
                    f"{name.strip()} saved as {role}",
                )
    if not accounts:
        return
    with right:
        st.subheader("Change or remove")
        chosen = st.selectbox("Person", [a.name for a in accounts], key="person_chosen")
        current = next(a for a in accounts if a.name == chosen)
        new_role = st.selectbox("New role", ROLES, index=ROLES.index(current.role), key="person_new_role")
        cols = st.columns(2)
        if cols[0].button("Set role", key="person_set_role"):
            save(
                ctx,
                lambda: ctx.writer(Permission.MANAGE).set_account_role(chosen, new_role),
                f"{chosen} is now {new_role}",
            )
        if cols[1].button("Remove", key="person_remove", type="primary"):
            save(
                ctx,
                lambda: ctx.writer(Permission.MANAGE).delete_account(chosen),
                f"{chosen} removed; their sessions ended",
            )


def save(ctx: Console, write: object, message: str) -> None:
    try:
        write()  # type: ignore[operator]
    except RegistryError as exc:
        st.error(str(exc))
        return
    st.session_state["people_flash"] = message
    st.rerun()  # the table and the choices above were read before this write
