"""The Ferryman admin console: ``ferryman admin`` runs ``streamlit run`` on this file."""

from __future__ import annotations

import math

import streamlit as st

from ferryman_server.admin_ui import session
from ferryman_server.admin_ui.auth import MAX_NAME_CHARS, MAX_PASSWORD_CHARS, LoginThrottle, log_in
from ferryman_server.admin_ui.context import Console, NotAllowed, Person, build_console
from ferryman_server.admin_ui.views import PAGES
from ferryman_server.kernel.proxies import client_address


@st.cache_resource
def console() -> Console:
    return build_console()


def browser_address(ctx: Console) -> str:
    """The address of this session's browser: behind a trusted proxy, the one it forwarded
    (empty when Streamlit reports none, as on loopback)."""
    peer = st.context.ip_address
    return client_address(
        peer if isinstance(peer, str) else "", st.context.headers.items(), ctx.common.proxies()
    )


@st.cache_resource
def throttle() -> LoginThrottle:
    return LoginThrottle()


def login(ctx: Console) -> None:
    st.title("Ferryman console")
    if ctx.settings.sso_provider:
        if email := session.sso_email():
            st.error(f"{email} has no console account: an admin can add one (ferryman admin add-person).")
            if st.button("Sign out", key="sso_logout"):
                st.logout()
            return
        if st.button("Log in with single sign-on", key="sso_login", type="primary"):
            provider = ctx.settings.sso_provider
            if provider == "default":
                st.login()
            else:
                st.login(provider)
    with st.form("login"):
        name = st.text_input("Name", key="login_name", max_chars=MAX_NAME_CHARS)
        password = st.text_input("Password", type="password", key="password", max_chars=MAX_PASSWORD_CHARS)
        if st.form_submit_button("Log in", key="login_submit"):
            try:
                outcome = log_in(throttle(), ctx.reader, name.strip(), password, browser_address(ctx))
            except Exception:  # nothing of the registry's error reaches an unauthenticated user
                st.error("The registry cannot be reached; try again shortly.")
                return
            if isinstance(outcome, Person):
                session.start(ctx, outcome)
                st.rerun()
            elif outcome > 0:
                st.error(f"Too many attempts: try again in {math.ceil(outcome)} s.")
            else:
                st.error("Wrong name or password.")


def main() -> None:
    st.set_page_config(page_title="Ferryman console", layout="wide")
    shared = console()
    try:
        person = session.restore(shared)
    except Exception:  # as at login: the registry's errors stay with the server
        st.error("The registry cannot be reached; try again shortly.")
        return
    if person is None:
        login(shared)
        return
    ctx = shared.looking(person)
    session.set_pending_cookie()
    st.sidebar.title("Ferryman")
    st.sidebar.caption(f"{person.name} ({person.role.value})")
    pages = [name for name, page in PAGES.items() if ctx.can(page.permission)]
    page = st.sidebar.radio("Page", pages, key="page")
    if st.sidebar.button("Log out", key="logout"):
        session.end(shared)
        login(shared)
        return
    try:
        PAGES[page].render(ctx)
    except NotAllowed as exc:
        st.error(f"Not allowed: {exc}.")
    except Exception as exc:  # a page must show a message, never a traceback
        st.error(f"This page could not be shown: {exc}")


main()
