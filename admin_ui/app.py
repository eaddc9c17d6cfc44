"""The Ferryman admin console: ``ferryman admin`` runs ``streamlit run`` on this file."""

from __future__ import annotations

import streamlit as st

from admin_ui.auth import LoginThrottle, check_login
from admin_ui.context import Console, build_console
from admin_ui.views import PAGES


@st.cache_resource
def console() -> Console:
    return build_console()


@st.cache_resource
def throttle() -> LoginThrottle:
    return LoginThrottle()


def login(ctx: Console) -> None:
    st.title("Ferryman console")
    with st.form("login"):
        password = st.text_input("Admin password", type="password", key="password")
        if st.form_submit_button("Log in", key="login_submit"):
            if (wait := throttle().wait_s()) > 0:
                st.error(f"Too many wrong passwords: logins are locked for {wait:.0f} s more.")
                return
            try:
                stored = ctx.reader.admin_password_hash()
            except Exception:  # nothing of the registry's error reaches an unauthenticated user
                st.error("The registry cannot be reached; try again shortly.")
                return
            ok = check_login(password, stored)
            throttle().record(ok)
            if ok:
                st.session_state["authenticated"] = True
                st.rerun()
            st.error("Wrong password.")


def main() -> None:
    st.set_page_config(page_title="Ferryman console", layout="wide")
    ctx = console()
    if not st.session_state.get("authenticated"):
        login(ctx)
        return
    st.sidebar.title("Ferryman")
    page = st.sidebar.radio("Page", list(PAGES), key="page")
    if st.sidebar.button("Log out"):
        st.session_state.clear()
        st.rerun()
    try:
        PAGES[page](ctx)
    except Exception as exc:  # a page must show a message, never a traceback
        st.error(f"This page could not be shown: {exc}")


main()
