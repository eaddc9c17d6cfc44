"""Engines for the registry: SQLite (WAL) by default, PostgreSQL in production."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url

# Concurrent writers (CLI, console, nodes' heartbeats) wait this long for SQLite's
# write lock instead of failing at once.
SQLITE_BUSY_TIMEOUT_MS = 5000
PRIVATE_FILE_MODE = 0o600


def normalize_url(url: str) -> str:
    """Use psycopg 3 for ``postgresql://`` URLs (SQLAlchemy would pick psycopg2)."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        return str(parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False))
    return url


def create_private(database: Path) -> None:
    """Create the SQLite file ``database`` readable by this user alone, unless it exists.

    The file holds key hashes, job data and uploaded files; SQLite gives its -wal and -shm
    files the database file's permissions. An existing file is never opened here: closing
    any descriptor of a file drops every POSIX lock this process holds on it, so a second
    engine in a process (a co-hosted service, a test) would drop the first one's SQLite
    locks. Another process could then take the file for its own, checkpoint and delete the
    WAL under the first engine, and the database reads as malformed."""
    database.parent.mkdir(parents=True, exist_ok=True)
    if database.exists():
        return
    with contextlib.suppress(FileExistsError):  # another process created it meanwhile
        os.close(os.open(database, os.O_CREAT | os.O_EXCL | os.O_RDWR, PRIVATE_FILE_MODE))


def make_engine(url: str, **kwargs: Any) -> Engine:
    """Create an engine for ``url``; SQLite files get WAL and a busy timeout."""
    url = normalize_url(url)
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True, **kwargs)
    if parsed.database and parsed.database != ":memory:":
        create_private(Path(parsed.database))
    engine = create_engine(url, connect_args={"check_same_thread": False}, **kwargs)

    @event.listens_for(engine, "connect")
    def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    return engine
