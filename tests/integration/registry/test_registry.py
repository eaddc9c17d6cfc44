"""The registry on SQLite and on PostgreSQL: migrations, the audited write path,
refused writes that change nothing, and keys that verify but never read back."""

from __future__ import annotations

import stat
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from keys import tenant_of
from sqlalchemy import Engine, event, inspect, text
from sqlmodel import SQLModel

from ferryman_server.registry.db import make_engine
from ferryman_server.registry.migrate import current_revision, head_revision, upgrade
from ferryman_server.registry.reader import RegistryReader
from ferryman_server.registry.snapshot import load_snapshot
from ferryman_server.registry.specs import QuotaLimits
from ferryman_server.registry.tables import DeadLetter
from ferryman_server.registry.validation import RegistryError
from ferryman_server.registry.writer import RegistryWriter, VersionSpec

SCHEMA = {
    "inputs": [{"name": "input", "dtype": "FP32", "shape": [4]}],
    "outputs": [{"name": "output", "dtype": "FP32", "shape": [2]}],
}


@pytest.fixture
def artifact(tmp_path: Path) -> Path:
    path = tmp_path / "model.pt2"
    path.write_bytes(b"weights")
    return path


def spec(artifact: Path, version: str = "1", **kw: Any) -> VersionSpec:
    return VersionSpec(
        model="mlp",
        version=version,
        artifact=str(artifact),
        format="torch_export",
        io_schema=SCHEMA,
        **kw,
    )


def table_contents(engine: Engine) -> dict[str, list[tuple[Any, ...]]]:
    with engine.connect() as conn:
        return {
            name: [tuple(row) for row in conn.execute(text(f'SELECT * FROM "{name}" ORDER BY 1'))]
            for name in SQLModel.metadata.tables
        }


def test_migrations_apply_from_empty_and_match_tables(registry_engine: Engine) -> None:
    assert current_revision(registry_engine) == head_revision()
    assert set(SQLModel.metadata.tables) <= set(inspect(registry_engine).get_table_names())
    with registry_engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), SQLModel.metadata)
    assert diff == [], f"tables and migrations disagree: {diff}"
    assert RegistryReader(registry_engine).revision() == 0


def test_stored_platform_handlers_take_the_one_import_name(db_url: str, artifact: Path) -> None:
    """A database made before the rooms moved under ``ferryman_server`` (revision 0011) names
    the demo's handlers ``gpu_node.demo...``; upgrading renames them, and leaves a tenant's own
    module (here one named ``gpu_node``, which the platform never shadows) as it was."""
    engine = make_engine(db_url)
    upgrade(engine, "0011")
    writer = RegistryWriter(engine)
    for version, handler in (("1", "gpu_node.demo.echo:EchoHandler"), ("2", "gpu_node.mine:Handler")):
        writer.register_version(spec(artifact, version, handler=handler))
    upgrade(engine)
    handlers = {v.version: v.handler for v in RegistryReader(engine).versions("mlp")}
    assert handlers == {"1": "ferryman_server.gpu_node.demo.echo:EchoHandler", "2": "gpu_node.mine:Handler"}
    engine.dispose()


def test_every_config_write_bumps_revision_and_audits(registry_engine: Engine, artifact: Path) -> None:
    writer, reader = RegistryWriter(registry_engine, actor="test"), RegistryReader(registry_engine)
    key = writer.create_tenant("acme")
    steps: list[tuple[str, Callable[[], object]]] = [
        ("tenant.update", lambda: writer.update_tenant("acme", tier="gold", priority=3)),
        ("key.issue", lambda: writer.issue_key("acme")),
        ("key.revoke", lambda: writer.revoke_key(key.prefix)),
        ("quota.set", lambda: writer.set_quota("acme", QuotaLimits(rpm=60, burst=10, mode="soft"))),
        ("version.register", lambda: writer.register_version(spec(artifact, "1"))),
        ("version.register", lambda: writer.register_version(spec(artifact, "2"))),
        ("route.set", lambda: writer.set_route("mlp", {"1": 100})),
        ("route.set", lambda: writer.set_route("mlp", {"1": 90, "2": 10}, sticky="user")),
        ("route.rollback", lambda: writer.rollback_route("mlp")),
        ("version.status", lambda: writer.set_version_status("mlp", "2", "DEPRECATED")),
        ("placement.add", lambda: writer.place("mlp", "1")),
        (
            "node.register",
            lambda: writer.register_node("n1", "127.0.0.1:1", device="cpu", capacity=2),
        ),
        ("node.lifecycle", lambda: writer.set_node_lifecycle("n1", "READY")),
    ]
    for expected_action, step in steps:
        before = reader.revision()
        step()
        assert reader.revision() == before + 1, expected_action
        newest = reader.audit_events(limit=1)[0]
        assert (newest.action, newest.revision, newest.actor) == (
            expected_action,
            before + 1,
            "test",
        )
    actions = [e.action for e in reversed(reader.audit_events(limit=100))]
    assert actions == ["tenant.create"] + [a for a, _ in steps]
    assert reader.route("mlp") is not None
    assert dict(reader.route("mlp").targets) == {"1": 100}  # type: ignore[union-attr]


def test_refused_writes_change_nothing(registry_engine: Engine, artifact: Path) -> None:
    writer = RegistryWriter(registry_engine)
    writer.create_tenant("acme")
    writer.register_version(spec(artifact, "1"))
    writer.set_route("mlp", {"1": 100})
    before = table_contents(registry_engine)
    refused: list[Callable[[], object]] = [
        lambda: writer.create_tenant("acme"),
        lambda: writer.create_tenant("Bad Name"),
        lambda: writer.create_tenant("heavy", weight=0),
        lambda: writer.update_tenant("acme", weight=float("nan")),
        lambda: writer.update_tenant("acme", weight=1e9),
        lambda: writer.issue_key("nobody"),
        lambda: writer.revoke_key("deadbeef"),
        lambda: writer.set_quota("nobody", QuotaLimits(rpm=1)),
        lambda: writer.set_quota("acme", QuotaLimits(rpm=-1)),
        lambda: writer.set_quota("acme", QuotaLimits(rpm=10, burst=20)),
        lambda: writer.set_quota("acme", QuotaLimits(rpm=10, mode="maybe")),
        lambda: writer.register_version(spec(artifact, "1")),
        lambda: writer.register_version(spec(artifact, "3", sha256="0" * 64)),
        lambda: writer.register_version(spec(artifact.with_name("missing.pt2"), "4")),
        lambda: writer.register_version(replace(spec(artifact, "5"), artifact=" ")),
        lambda: writer.set_route("mlp", {"1": 90, "2": 20}),
        lambda: writer.set_route("mlp", {"1": 50, "9": 50}),
        lambda: writer.set_route("nomodel", {"1": 100}),
        lambda: writer.set_route("mlp", {"1": 100}, sticky="sometimes"),
        lambda: writer.set_route("mlp", {"1": 100}, fallback="nomodel"),
        lambda: writer.rollback_route("mlp"),
        lambda: writer.set_version_status("mlp", "1", "REGISTERED"),
        lambda: writer.place("mlp", "9"),
    ]
    for attempt in refused:
        with pytest.raises(RegistryError):
            attempt()
        assert table_contents(registry_engine) == before


def test_keys_verify_but_never_read_back(registry_engine: Engine) -> None:
    writer = RegistryWriter(registry_engine)
    key = writer.create_tenant("acme")
    second = writer.issue_key("acme")
    assert tenant_of(registry_engine, key.plaintext) == "acme"
    assert tenant_of(registry_engine, second.plaintext) == "acme"
    assert tenant_of(registry_engine, key.plaintext[:-1] + "x") is None
    assert tenant_of(registry_engine, "fm_00000000_nothing") is None
    dump = repr(table_contents(registry_engine))
    secret = key.plaintext.split("_", 2)[2]
    assert key.prefix in dump and secret not in dump and second.plaintext not in dump
    writer.revoke_key(key.prefix)
    assert tenant_of(registry_engine, key.plaintext) is None
    assert tenant_of(registry_engine, second.plaintext) == "acme"
    writer.update_tenant("acme", disabled=True)
    assert tenant_of(registry_engine, second.plaintext) is None


def test_operational_records_neither_bump_nor_audit(registry_engine: Engine) -> None:
    writer, reader = RegistryWriter(registry_engine), RegistryReader(registry_engine)
    writer.register_node("n1", "127.0.0.1:1", device="cpu", capacity=1)
    revision = reader.revision()
    writer.heartbeat("n1", ["mlp:1"])
    writer.record_dead_letter(
        DeadLetter(
            model="mlp",
            version="1",
            request_id="r1",
            tenant="acme",
            input_sha256="a" * 64,
            error="boom",
        )
    )
    assert reader.revision() == revision
    assert reader.nodes()[0].loaded_versions == ["mlp:1"]
    assert [d.request_id for d in reader.dead_letters()] == ["r1"]
    with pytest.raises(RegistryError):
        writer.heartbeat("ghost", [])


def test_an_embedded_registrys_files_are_its_users_alone(tmp_path: Path) -> None:
    """registry.db holds key hashes, job data and uploaded files: 0600, as are its WAL files."""
    engine = make_engine(f"sqlite:///{tmp_path / 'data' / 'registry.db'}")
    upgrade(engine)
    RegistryWriter(engine).create_tenant("acme")
    files = sorted((tmp_path / "data").glob("registry.db*"))
    assert [f.name for f in files][:1] == ["registry.db"]
    assert {f.name: stat.S_IMODE(f.stat().st_mode) for f in files} == {f.name: 0o600 for f in files}
    engine.dispose()


def test_a_versions_item_limit_is_its_schemas_or_its_batch_size_whichever_is_less(
    registry_engine: Engine, artifact: Path
) -> None:
    """One request is batched whole: every reader of the snapshot (router, jobs, the OIP
    config) sees the item limit the batcher will hold to."""
    writer = RegistryWriter(registry_engine, actor="test")
    for version, max_items in (("1", 64), ("2", 8)):
        schema = {**SCHEMA, "max_items": max_items}
        writer.register_version(
            VersionSpec("mlp", version, str(artifact), "torch_export", schema, max_batch_size=32)
        )
    versions = load_snapshot(registry_engine).versions
    assert versions["mlp:1"].schema.max_items == 32
    assert versions["mlp:2"].schema.max_items == 8


def test_a_second_engine_on_a_sqlite_file_keeps_the_first_ones_locks(tmp_path: Path) -> None:
    """Two engines on one SQLite file in one process (a co-hosted service, a test's
    in-process router): making the second must not drop the first one's locks. When it
    did, another process closing its connection took the file for its own and deleted the
    WAL under the live engine, and the registry read as malformed from then on."""
    database = tmp_path / "registry.db"
    first = make_engine(f"sqlite:///{database}")
    with first.begin() as conn:
        conn.execute(text("CREATE TABLE t (x INTEGER)"))
        conn.execute(text("INSERT INTO t VALUES (1)"))
    with first.connect() as live:
        assert live.execute(text("SELECT count(*) FROM t")).scalar() == 1
        make_engine(f"sqlite:///{database}")
        other = (
            "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('PRAGMA journal_mode=WAL'); "
            "c.execute('INSERT INTO t VALUES (2)'); c.commit(); c.close()"
        )
        subprocess.run([sys.executable, "-c", other, str(database)], check=True, timeout=60)
        # A connection of this process is open: the other process was not the last, so the WAL stays.
        assert database.with_name("registry.db-wal").exists()
        assert live.execute(text("SELECT count(*) FROM t")).scalar() == 2
    assert stat.S_IMODE(database.stat().st_mode) == 0o600


def test_a_push_writes_chunk_by_chunk_and_an_interrupted_one_is_written_over(
    registry_engine: Engine, tmp_path: Path
) -> None:
    """Each chunk commits on its own (one transaction for the whole upload held SQLite's
    write lock, and every heartbeat waited, for as long as it took), so another writer
    gets in between; chunks an interrupted push left, with no record naming them, are
    written over by the next push."""
    weights = tmp_path / "big.bin"
    weights.write_bytes(bytes(range(256)) * 40)  # 10 chunks of 1,024 bytes
    writer, reader = RegistryWriter(registry_engine, actor="test"), RegistryReader(registry_engine)
    transactions = 0
    others: list[str] = []

    def between(conn: Any) -> None:
        nonlocal transactions
        transactions += 1
        if transactions == 5:  # mid-push, between two chunks: another writer goes through

            def write() -> None:
                try:
                    others.append(writer.create_tenant("between").prefix)
                except Exception as exc:  # said in the assertion, not lost in a thread
                    others.append(repr(exc)[:300])

            writing = threading.Thread(target=write)
            writing.start()
            writing.join(10)

    event.listen(registry_engine, "begin", between)
    try:
        stored = writer.push_artifact(weights, chunk_bytes=1024)
    finally:
        event.remove(registry_engine, "begin", between)
    assert stored.chunks == 10 and transactions >= 10, transactions
    assert len(others) == 1 and len(others[0]) == 8, others
    assert b"".join(reader.artifact_chunks(stored.sha256)) == weights.read_bytes()
    with registry_engine.begin() as conn:  # as if the push had died before its record
        conn.execute(text("DELETE FROM artifacts"))
    again = writer.push_artifact(weights, chunk_bytes=2048)
    assert again.chunks == 5
    assert b"".join(reader.artifact_chunks(again.sha256)) == weights.read_bytes()


def test_a_versions_failure_outlives_its_nodes_restart(registry_engine: Engine, artifact: Path) -> None:
    """A node's heartbeats name what failed there; after a restart they say nothing of it
    until it fails again, and the version looked fine: the reason now stays until the
    version serves on that node or its placement is taken back."""
    writer = RegistryWriter(registry_engine, actor="test")
    writer.register_version(spec(artifact))
    writer.place("mlp", "1", "n1")
    writer.register_node("n1", "127.0.0.1:1", device="cpu", capacity=1)

    reader = RegistryReader(registry_engine)

    def failed() -> dict[str, list[tuple[str, str]]]:
        return reader.node_versions(heartbeat_timeout_s=60.0).failed

    writer.heartbeat("n1", [], {"mlp:1": "artifact lost its chunk 3"})
    assert failed() == {"mlp:1": [("n1", "artifact lost its chunk 3")]}
    writer.register_node("n1", "127.0.0.1:1", device="cpu", capacity=1)  # restarted
    writer.heartbeat("n1", [], {})
    assert failed() == {"mlp:1": [("n1", "artifact lost its chunk 3")]}, "the reason survives"
    writer.heartbeat("n1", ["mlp:1"], {})
    assert failed() == {}, "serving there clears it"
    writer.heartbeat("n1", [], {"mlp:1": "again"})
    assert writer.unplace("mlp", "1", "n1")
    assert failed() == {}, "its placement taken back, its failures go"
