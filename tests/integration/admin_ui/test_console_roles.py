"""People and roles in the console (AppTest, real registry): what each role sees and may
change, that the audit log names the person, and that sessions end when they should."""

from __future__ import annotations

import time

import pytest
import streamlit as st
from console_app import APP, EVERYONE_SEES, TIMEOUT_S, logged_in, open_page
from streamlit.testing.v1 import AppTest

from ferryman_server.admin_ui.auth import MAX_NAME_CHARS, MAX_PASSWORD_CHARS, authenticate, hash_password
from ferryman_server.admin_ui.context import NotAllowed, Person, build_console
from ferryman_server.admin_ui.session import sign, unsign
from ferryman_server.registry.accounts import MAX_SESSIONS_PER_ACCOUNT, Permission, Role
from ferryman_server.registry.reader import RegistryReader
from ferryman_server.registry.validation import RegistryError
from ferryman_server.registry.writer import RegistryWriter

Registry = tuple[RegistryWriter, RegistryReader]
PEOPLE_PASSWORD = "a long enough one"
WRITE_WIDGETS = [
    "route_apply",
    "promote",
    "rollback",
    "rollout_start",
    "drain",
    "quota_submit",
    "create_submit",
    "edit_submit",
    "issue_key",
    "register_submit",
    "person_submit",
]


def people(writer: RegistryWriter) -> None:
    for name, role in (("vera", "viewer"), ("olivia", "operator"), ("ada", "admin")):
        writer.save_account(name, role, hash_password(PEOPLE_PASSWORD))
    writer.create_tenant("acme")
    writer.set_route("mlp", {"1": 90, "2": 10})
    writer.register_node("n1", "127.0.0.1:1", device="cpu", capacity=1)
    writer.set_node_lifecycle("n1", "READY")


def buttons(at: AppTest) -> set[str]:
    return {str(b.key) for b in at.button} & set(WRITE_WIDGETS)


def test_a_viewer_sees_every_page_and_can_change_nothing(registry: Registry) -> None:
    writer, reader = registry
    people(writer)
    revision = reader.revision()
    at = logged_in("vera", PEOPLE_PASSWORD)
    assert list(at.sidebar.radio(key="page").options) == EVERYONE_SEES  # no People page
    for page in EVERYONE_SEES:
        open_page(at, page)
        assert at.header[0].value == page and not at.error, page
        assert buttons(at) == set(), f"{page} offers a viewer {buttons(at)}"
    open_page(at, "Routing")
    assert at.dataframe[0].value["weight %"].tolist() == [90, 10]  # the weights, read-only
    assert reader.revision() == revision


def test_an_operator_sets_weights_and_quotas_but_manages_no_people(registry: Registry) -> None:
    writer, reader = registry
    people(writer)
    at = logged_in("olivia", PEOPLE_PASSWORD)
    assert "People" not in at.sidebar.radio(key="page").options
    open_page(at, "Routing")
    at.slider(key="weight_mlp_1").set_value(50)
    at.slider(key="weight_mlp_2").set_value(50)
    at.button(key="route_apply").click().run()
    assert dict(reader.route("mlp").targets) == {"1": 50, "2": 50}  # type: ignore[union-attr]
    open_page(at, "Quotas")
    at.number_input(key="q_rpm").set_value(60)
    at.button(key="quota_submit").click().run()
    assert reader.quota_policies("acme")[0].rpm == 60
    open_page(at, "Tenants")
    assert buttons(at) == set()  # tenants and keys are an admin's
    open_page(at, "Audit log")
    table = at.dataframe[0].value
    mine = table[table["actor"] == "olivia"]["action"].tolist()
    assert sorted(mine) == ["quota.set", "route.set"], table.to_string()


def test_an_admin_adds_a_person_changes_their_role_and_removes_them(registry: Registry) -> None:
    writer, reader = registry
    people(writer)
    at = open_page(logged_in("ada", PEOPLE_PASSWORD), "People")
    at.text_input(key="person_name").input("otto")
    at.selectbox(key="person_role").set_value("operator")
    at.text_input(key="person_password").input("short")
    at.button(key="person_submit").click().run()
    assert "at least 8" in at.error[0].value and reader.account("otto") is None
    at.text_input(key="person_name").input("otto")
    at.selectbox(key="person_role").set_value("operator")
    at.text_input(key="person_password").input(PEOPLE_PASSWORD)
    at.button(key="person_submit").click().run()
    otto = reader.account("otto")
    assert otto is not None and otto.role == "operator" and PEOPLE_PASSWORD not in otto.password_hash
    assert "Tenants" in logged_in("otto", PEOPLE_PASSWORD).sidebar.radio(key="page").options
    at.selectbox(key="person_chosen").set_value("otto")
    at.selectbox(key="person_new_role").set_value("viewer")
    at.button(key="person_set_role").click().run()
    assert reader.account("otto").role == "viewer"  # type: ignore[union-attr]
    at.button(key="person_remove").click().run()
    assert reader.account("otto") is None
    events = [(e.actor, e.action, e.entity_key) for e in reader.audit_events(limit=3)]
    assert events == [
        ("ada", "account.delete", "otto"),
        ("ada", "account.role", "otto"),
        ("ada", "account.save", "otto"),
    ]
    assert reader.audit_events(limit=3)[2].detail == {"role": "operator", "created": True}


def test_a_wrong_password_for_a_real_name_is_refused(registry: Registry) -> None:
    writer, _ = registry
    people(writer)
    at = AppTest.from_file(APP, default_timeout=TIMEOUT_S).run()
    at.text_input(key="login_name").input("ada")
    at.text_input(key="password").input("admin-ish guess")
    at.button(key="login_submit").click().run()
    assert "Wrong name or password" in at.error[0].value and not at.sidebar.radio


def test_a_viewer_is_refused_by_the_writer_itself(registry: Registry) -> None:
    writer, _ = registry
    people(writer)
    console = build_console()
    viewer = console.looking(Person("vera", Role.VIEWER))
    with pytest.raises(NotAllowed):
        viewer.writer(Permission.OPERATE)
    operator = console.looking(Person("olivia", Role.OPERATOR))
    assert operator.writer(Permission.OPERATE).actor == "olivia"
    with pytest.raises(NotAllowed):
        operator.writer(Permission.MANAGE)
    with pytest.raises(RegistryError, match="invalid role"):
        writer.save_account("eve", "root", hash_password(PEOPLE_PASSWORD))
    with pytest.raises(RegistryError, match="scrypt"):
        writer.save_account("eve", "admin", "plaintext")


def test_sessions_expire_end_at_logout_and_with_their_account(registry: Registry) -> None:
    writer, reader = registry
    people(writer)
    writer.open_session("vera", "token-1", ttl_s=60)
    writer.open_session("vera", "token-2", ttl_s=60)
    writer.open_session("olivia", "short", ttl_s=0.01)
    time.sleep(0.02)
    assert reader.session_account("token-1") == "vera" and reader.session_account("short") is None
    writer.close_session("token-1")
    assert reader.session_account("token-1") is None and reader.session_account("token-2") == "vera"
    writer.delete_account("vera")
    assert reader.session_account("token-2") is None
    for n in range(MAX_SESSIONS_PER_ACCOUNT + 5):  # a script logging in forever fills nothing
        writer.open_session("ada", f"t{n}", ttl_s=60)
    live = [n for n in range(MAX_SESSIONS_PER_ACCOUNT + 5) if reader.session_account(f"t{n}")]
    assert len(live) == MAX_SESSIONS_PER_ACCOUNT and live[-1] == MAX_SESSIONS_PER_ACCOUNT + 4


def test_a_cookie_is_honoured_only_well_signed_and_unexpired() -> None:
    secret, now = b"k" * 32, 1_000_000.0
    cookie = sign("tok", now + 60, secret)
    assert unsign(cookie, secret, now) == "tok"
    assert unsign(cookie, b"x" * 32, now) is None  # another console's key
    assert unsign(cookie, secret, now + 61) is None  # expired
    token, expiry, signature = cookie.split(".")
    assert unsign(f"{token}.{int(expiry) + 3600}.{signature}", secret, now) is None  # stretched
    assert unsign(f"other.{expiry}.{signature}", secret, now) is None  # another token
    assert unsign("garbage", secret, now) is None and unsign("a.b.c", secret, now) is None


def test_single_sign_on_maps_the_vouched_e_mail_to_its_account(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer, reader = registry
    people(writer)
    writer.save_account("ada@example.com", "operator", hash_password(PEOPLE_PASSWORD))
    monkeypatch.setenv("FERRYMAN_CONSOLE_SSO_PROVIDER", "default")
    st.cache_resource.clear()
    at = AppTest.from_file(APP, default_timeout=TIMEOUT_S)
    at.user = {"is_logged_in": True, "email": "Ada@Example.com"}
    at.run()
    assert not at.exception and at.sidebar.caption[0].value == "ada@example.com (operator)"
    assert "People" not in at.sidebar.radio(key="page").options
    open_page(at, "Quotas")
    at.number_input(key="q_rpm").set_value(30)
    at.button(key="quota_submit").click().run()
    assert reader.audit_events(limit=1)[0].actor == "ada@example.com"
    stranger = AppTest.from_file(APP, default_timeout=TIMEOUT_S)
    stranger.user = {"is_logged_in": True, "email": "mallory@example.com"}
    stranger.run()
    assert "has no console account" in stranger.error[0].value and not stranger.sidebar.radio
    anonymous = AppTest.from_file(APP, default_timeout=TIMEOUT_S)
    anonymous.user = {"is_logged_in": False}
    anonymous.run()
    assert anonymous.button(key="sso_login") and not anonymous.sidebar.radio


def test_account_names_are_short_names_or_e_mail_addresses(registry: Registry) -> None:
    writer, _ = registry
    for bad in ("Ada", "a" * 65, "x@y", "<script>", "ada@ex..com", ""):
        with pytest.raises(RegistryError, match="invalid account name"):
            writer.save_account(bad, "viewer", hash_password(PEOPLE_PASSWORD))


def test_oversized_or_unknown_logins_are_refused_alike(registry: Registry) -> None:
    writer, reader = registry
    people(writer)
    assert authenticate(reader, "vera", PEOPLE_PASSWORD) == Person("vera", Role.VIEWER)
    assert authenticate(reader, "vera", "x" * (MAX_PASSWORD_CHARS + 1)) is None
    assert authenticate(reader, "v" * (MAX_NAME_CHARS + 1), PEOPLE_PASSWORD) is None
    assert authenticate(reader, "nobody", PEOPLE_PASSWORD) is None  # after the same scrypt as a real name
