"""Logins that survive a browser reload: a signed cookie naming a session in the registry.

The cookie holds ``token.expiry.signature``: the signature (HMAC-SHA256 under the console's
session secret) keeps a forged or stretched cookie from being looked up at all; the registry
holds the token's hash, so logging out (deleting the row) ends the login on every browser
that holds it, and an expired or deleted session lets nobody in. Streamlit serves pages
over its own websocket, so the cookie is set by a script on the page: it cannot be
HttpOnly, which is why it carries a random token and nothing else.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time

import streamlit as st

from ferryman_server.admin_ui.auth import BOOTSTRAP_ACCOUNT
from ferryman_server.admin_ui.context import Console, Person
from ferryman_server.registry.accounts import Role
from ferryman_server.registry.writer import RegistryWriter

COOKIE = "ferryman_console"
TOKEN_BYTES = 32
SESSION_KEY = "person"
PENDING_COOKIE_KEY = "set_cookie"


@st.cache_resource
def _process_secret() -> bytes:
    return secrets.token_bytes(TOKEN_BYTES)


def _secret(ctx: Console) -> bytes:
    configured = ctx.settings.session_secret.get_secret_value()
    return configured.encode() if configured else _process_secret()


def sign(token: str, expires_at: float, secret: bytes) -> str:
    body = f"{token}.{int(expires_at)}"
    return f"{body}.{hmac.new(secret, body.encode(), hashlib.sha256).hexdigest()}"


def unsign(value: str, secret: bytes, now: float) -> str | None:
    """The token of a cookie that is well signed and unexpired, else None."""
    try:
        token, expiry, signature = value.split(".")
        expires_at = int(expiry)
    except ValueError:
        return None
    good = hmac.new(secret, f"{token}.{expiry}".encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(good, signature) or expires_at <= now:
        return None
    return token


def person_of(ctx: Console, name: str) -> Person | None:
    """The person now behind ``name``: their role is read on every restore, so a changed
    role or a deleted account takes effect at the next reload."""
    account = ctx.reader.account(name)
    if account is not None:
        return Person(account.name, Role(account.role))
    return Person(BOOTSTRAP_ACCOUNT, Role.ADMIN) if name == BOOTSTRAP_ACCOUNT else None


def start(ctx: Console, person: Person) -> None:
    """Log ``person`` in: a session row, and a cookie the next page run sets."""
    token = secrets.token_urlsafe(TOKEN_BYTES)
    ttl = ctx.settings.session_ttl_s
    expires_at = RegistryWriter(ctx.engine, actor=person.name).open_session(person.name, token, ttl)
    st.session_state[SESSION_KEY] = person
    st.session_state[PENDING_COOKIE_KEY] = (sign(token, expires_at, _secret(ctx)), ttl)


def _script(js: str) -> None:
    st.html(f"<script>{js}</script>", unsafe_allow_javascript=True, width="content")


def set_pending_cookie() -> None:
    """Write the cookie of a login that just happened (a script on the page does)."""
    pending = st.session_state.pop(PENDING_COOKIE_KEY, None)
    if pending is not None:
        value, ttl = pending
        cookie = f"{COOKIE}={value}; Max-Age={int(ttl)}; Path=/; SameSite=Strict"
        secure = "(location.protocol === 'https:' ? '; Secure' : '')"
        _script(f"document.cookie = {json.dumps(cookie)} + {secure};")


def sso_email() -> str | None:
    """The e-mail address the identity provider vouches for, when signed in through it."""
    if not st.user.is_logged_in:
        return None
    email = st.user.get("email")
    return str(email).strip().lower() if email else None


def restore(ctx: Console) -> Person | None:
    """The person of this browser session: logged in here, signed in through single sign-on
    as someone with an account, or holding a valid cookie."""
    if (person := st.session_state.get(SESSION_KEY)) is not None:
        return person  # type: ignore[no-any-return]
    if ctx.settings.sso_provider and (email := sso_email()):
        account = ctx.reader.account(email)
        person = Person(account.name, Role(account.role)) if account else None
        if person is not None:
            st.session_state[SESSION_KEY] = person
        return person
    value = st.context.cookies.get(COOKIE)
    token = unsign(value, _secret(ctx), time.time()) if value else None
    name = ctx.reader.session_account(token) if token else None
    person = person_of(ctx, name) if name else None
    if person is not None:
        st.session_state[SESSION_KEY] = person
    return person


def end(ctx: Console) -> None:
    """Log out: the session row goes (on every browser holding it) and the cookie too; a
    single sign-on session is ended with the identity cookie Streamlit keeps."""
    if ctx.settings.sso_provider and st.user.is_logged_in:
        st.session_state.clear()
        st.logout()
    value = st.context.cookies.get(COOKIE)
    token = unsign(value, _secret(ctx), time.time()) if value else None
    if token:
        RegistryWriter(ctx.engine).close_session(token)
    st.session_state.clear()
    _script(f"document.cookie = {json.dumps(f'{COOKIE}=; Max-Age=0; Path=/; SameSite=Strict')};")
