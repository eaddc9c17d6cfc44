"""The console driven with Streamlit's AppTest against a real registry."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import streamlit as st
from console_app import APP, PASSWORD, SCHEMA, TIMEOUT_S, console_url, logged_in, open_page
from keys import tenant_of
from streamlit.testing.v1 import AppTest

from ferryman_server.admin_ui.auth import FREE_ATTEMPTS
from ferryman_server.jobs.sql_store import SqlJobStore
from ferryman_server.jobs.store import JobRecord, State
from ferryman_server.registry.db import make_engine
from ferryman_server.registry.reader import RegistryReader
from ferryman_server.registry.tables import DeadLetter
from ferryman_server.registry.writer import RegistryWriter, VersionSpec


def test_nothing_is_visible_before_login(registry: tuple[RegistryWriter, RegistryReader]) -> None:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT_S).run()
    assert not at.sidebar.radio and not at.dataframe
    at.text_input(key="login_name").input("admin")
    at.text_input(key="password").input("wrong").run()
    at.button(key="login_submit").click().run()
    assert at.error and "Wrong name or password" in at.error[0].value
    assert not at.sidebar.radio


def test_every_page_renders_without_exception(registry: tuple[RegistryWriter, RegistryReader]) -> None:
    at = logged_in()
    for page in at.sidebar.radio(key="page").options:
        open_page(at, page)
        assert at.header and at.header[0].value == page


def test_create_tenant_and_key_shown_once(
    registry: tuple[RegistryWriter, RegistryReader], tmp_path: Path
) -> None:
    _, reader = registry
    at = open_page(logged_in(), "Tenants")
    at.text_input(key="tenant_name").input("acme")
    at.button(key="create_submit").click().run()
    assert not at.exception
    (tenant,) = reader.tenants()
    key = at.code[0].value
    assert tenant.name == "acme" and key.startswith("fm_")
    assert tenant_of(make_engine(console_url(tmp_path)), key) == "acme"
    at.sidebar.radio(key="page").set_value("Overview").run()
    at.sidebar.radio(key="page").set_value("Tenants").run()
    assert not at.code, "the key is shown only once"


def test_set_a_quota(registry: tuple[RegistryWriter, RegistryReader]) -> None:
    writer, reader = registry
    writer.create_tenant("acme")
    at = open_page(logged_in(), "Quotas")
    at.number_input(key="q_rpm").set_value(120)
    at.number_input(key="q_burst").set_value(20)
    at.radio(key="q_mode").set_value("soft")
    at.button(key="quota_submit").click().run()
    assert not at.exception and at.success
    (policy,) = reader.quota_policies("acme")
    assert (policy.rpm, policy.burst, policy.tpm, policy.mode) == (120, 20, None, "soft")


def test_canary_weights_bad_weights_and_rollback(registry: tuple[RegistryWriter, RegistryReader]) -> None:
    _, reader = registry
    at = open_page(logged_in(), "Routing")
    at.slider(key="weight_mlp_1").set_value(90)
    at.slider(key="weight_mlp_2").set_value(10)
    at.button(key="route_apply").click().run()
    assert not at.exception
    route = reader.route("mlp")
    assert route is not None and dict(route.targets) == {"1": 90, "2": 10}
    revision = reader.revision()
    at.slider(key="weight_mlp_1").set_value(90)
    at.slider(key="weight_mlp_2").set_value(30)
    at.button(key="route_apply").click().run()
    assert at.error and "sum to 100, got 120" in at.error[0].value
    assert reader.revision() == revision and dict(reader.route("mlp").targets) == {"1": 90, "2": 10}  # type: ignore[union-attr]
    at.button(key="rollback").click().run()
    assert not at.exception
    assert dict(reader.route("mlp").targets) == {"1": 100}  # type: ignore[union-attr]
    assert at.success and "rolled back" in at.success[0].value


def test_promote_canary_and_drain_a_node(registry: tuple[RegistryWriter, RegistryReader]) -> None:
    writer, reader = registry
    writer.set_route("mlp", {"1": 90, "2": 10})
    writer.register_node("n1", "127.0.0.1:1", device="cpu", capacity=1)
    writer.set_node_lifecycle("n1", "READY")
    at = open_page(logged_in(), "Routing")
    at.button(key="promote").click().run()
    assert dict(reader.route("mlp").targets) == {"1": 0, "2": 100}  # type: ignore[union-attr]
    open_page(at, "Nodes")
    at.button(key="drain").click().run()
    assert not at.exception and reader.nodes()[0].lifecycle == "DRAINING"
    open_page(at, "Audit log")
    at.text_input(key="audit_search").input("node.lifecycle").run()
    assert "DRAINING" in at.dataframe[0].value.to_string()


def test_guessing_is_throttled_with_a_notice(registry: tuple[RegistryWriter, RegistryReader]) -> None:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT_S).run()
    errors = []
    at.text_input(key="login_name").input("admin")
    for guess in range(FREE_ATTEMPTS + 2):
        at.text_input(key="password").input(f"guess-{guess}")
        at.button(key="login_submit").click().run()
        errors.append(at.error[0].value)
    # The free checks, counted before each check: then the account (and address) waits.
    assert errors[:FREE_ATTEMPTS] == ["Wrong name or password."] * FREE_ATTEMPTS
    assert all(e.startswith("Too many attempts: try again in") for e in errors[FREE_ATTEMPTS:])
    at.text_input(key="password").input(PASSWORD)
    at.button(key="login_submit").click().run()
    assert not at.sidebar.radio and "Too many attempts" in at.error[0].value  # even the right one


def test_login_with_the_registry_down_shows_a_line_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FERRYMAN_DATABASE_URL", "postgresql+psycopg://nobody@127.0.0.1:1/none")
    st.cache_resource.clear()
    try:
        at = AppTest.from_file(APP, default_timeout=TIMEOUT_S).run()
        at.text_input(key="login_name").input("admin")
        at.text_input(key="password").input("anything")
        at.button(key="login_submit").click().run()
        assert not at.exception
        assert [e.value for e in at.error] == ["The registry cannot be reached; try again shortly."]
    finally:
        st.cache_resource.clear()


def test_model_descriptions_are_plain_text(
    registry: tuple[RegistryWriter, RegistryReader], tmp_path: Path
) -> None:
    writer, _ = registry
    artifact = tmp_path / "other.pt2"
    artifact.write_bytes(b"weights")
    hostile = "![pixel](http://tracker.invalid/p.png) **bold**"
    spec = VersionSpec(
        model="other", version="1", artifact=str(artifact), format="torch_export", io_schema=SCHEMA
    )
    writer.register_version(replace(spec, description=hostile))
    at = open_page(logged_in(), "Models")
    assert hostile in [t.value for t in at.text]  # shown as typed, never rendered as markdown
    assert not any("tracker.invalid" in m.value for m in at.markdown)
    assert not any("tracker.invalid" in c.value for c in at.caption)


def test_an_artifact_uri_is_plain_text(
    registry: tuple[RegistryWriter, RegistryReader], tmp_path: Path
) -> None:
    """A file name may hold markup: rendered, it made the operator's browser fetch an image."""
    writer, _ = registry
    artifact = tmp_path / "m` ![pixel](https:tracker.invalid) `.pt2"  # a file name has no slash
    artifact.write_bytes(b"weights")
    writer.register_version(
        VersionSpec(
            model="pathy", version="1", artifact=str(artifact), format="torch_export", io_schema=SCHEMA
        )
    )
    at = open_page(logged_in(), "Models")
    assert any(str(artifact) in t.value for t in at.text)
    assert not any("tracker.invalid" in m.value for m in at.markdown)


def test_a_rollout_starts_shows_its_verdict_and_pauses_resumes_and_aborts(
    registry: tuple[RegistryWriter, RegistryReader],
) -> None:
    writer, reader = registry
    at = open_page(logged_in(), "Routing")
    at.selectbox(key="rollout_candidate").set_value("2")
    at.text_input(key="rollout_steps").input("10,50,100")
    at.number_input(key="rollout_dwell").set_value(5.0)
    at.button(key="rollout_start").click().run()
    assert not at.exception, at.exception
    (rollout,) = reader.rollouts("mlp")
    assert (rollout.state, rollout.steps, rollout.dwell_s) == ("WARMING", [10, 50, 100], 5.0)
    writer.weigh_rollout("mlp", ["n1"], step=0)  # what the controller does once v2 is warm
    check = {"outcome": "inconclusive", "reasons": ["too few requests (3 canary, 40 baseline; 50 each)"]}
    writer.record_rollout_check("mlp", {**check, "numbers": {"canary_requests": 3.0, "canary_p99_ms": None}})
    at.run()
    shown = " ".join(str(m.value) for m in at.metric)
    assert "RUNNING" in shown and "10%" in shown and "1 of 3" in shown
    assert "too few requests" in at.info[0].value
    at.button(key="rollout_pause").click().run()
    assert reader.rollouts("mlp")[0].state == "PAUSED"
    assert dict(reader.route("mlp").targets) == {"1": 90, "2": 10}  # type: ignore[union-attr]
    at.button(key="rollout_resume").click().run()
    assert reader.rollouts("mlp")[0].state == "WARMING"
    at.button(key="rollout_abort").click().run()
    assert reader.rollouts("mlp")[0].state == "ABORTED"
    assert dict(reader.route("mlp").targets) == {"1": 100, "2": 0}  # type: ignore[union-attr]
    assert reader.audit_events(limit=1)[0].actor == "admin"  # the person, by name


def test_a_tenants_jobs_show_their_progress_and_one_is_cancelled(
    registry: tuple[RegistryWriter, RegistryReader], monkeypatch: pytest.MonkeyPatch
) -> None:
    writer, _ = registry
    writer.create_tenant("acme")
    writer.create_tenant("other")
    assert "keeps no durable jobs" in open_page(logged_in(), "Jobs").info[0].value
    monkeypatch.setenv("FERRYMAN_JOBS_IN_REGISTRY", "true")
    st.cache_resource.clear()
    store = SqlJobStore(os.environ["FERRYMAN_DATABASE_URL"], timeout_s=5)

    async def seed() -> None:
        now = time.time()
        for job_id, tenant in (("nightly", "acme"), ("theirs", "other")):
            record = JobRecord(
                tenant, job_id, "mlp", "1", State.QUEUED, 3, 0, 0, 0.0, now, now + 60, 0.0, "d", {}, 0.1, 0.0
            )
            await store.create(record, [b"a", b"b", b"c"])
        (first, *_) = await store.claim("worker", 1, block_ms=0, idle_ms=60_000)
        await store.record(first, b"answer", True, 0.05)

    asyncio.run(seed())
    at = open_page(logged_in(), "Jobs")
    at.selectbox(key="jobs_tenant").set_value("acme").run()
    (shown,) = at.dataframe[0].value.to_dict("records")
    assert (shown["job"], shown["state"], shown["succeeded"], shown["total"]) == ("nightly", "running", 1, 3)
    assert at.metric[0].value == "5"  # items waiting: both jobs' (the recorded one is done)
    at.selectbox(key="cancel_job_id").set_value("nightly")
    at.button(key="cancel_job_submit").click().run()
    assert not at.exception and at.success and "1 of 3 items ran" in at.success[0].value

    async def states() -> list[State | None]:
        jobs = [await store.get("acme", "nightly"), await store.get("other", "theirs")]
        await store.close()
        return [job.state if job else None for job in jobs]

    assert asyncio.run(states()) == [State.CANCELLED, State.QUEUED]  # only the one chosen


def test_the_overview_counts_the_last_hours_dead_letters(
    registry: tuple[RegistryWriter, RegistryReader],
) -> None:
    writer, reader = registry
    at = logged_in()
    assert at.success and "Nothing wrong right now" in at.success[0].value
    letter = DeadLetter(
        model="mlp", version="1", request_id="r-1", tenant="acme", input_sha256="ab" * 32, error="ValueError"
    )
    writer.record_dead_letter(letter)
    at.run()
    assert "1 dead letters in the last hour" in at.error[0].value
    assert reader.dead_letter_count(datetime.now(UTC) + timedelta(seconds=1)) == 0
