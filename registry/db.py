"""Engines for the registry: SQLite (WAL) by default, PostgreSQL in production."""

from __future__ import annotations

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


def make_engine(url: str, **kwargs: Any) -> Engine:
    """Create an engine for ``url``; SQLite files get WAL and a busy timeout."""
    url = normalize_url(url)
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True, **kwargs)
    if parsed.database and parsed.database != ":memory:":
        database = Path(parsed.database)
        database.parent.mkdir(parents=True, exist_ok=True)
        # The file holds key hashes, job data and uploaded files: this user's alone. SQLite
        # gives its -wal and -shm files the database file's permissions.
        os.close(os.open(database, os.O_CREAT | os.O_RDWR, PRIVATE_FILE_MODE))
    engine = create_engine(url, connect_args={"check_same_thread": False}, **kwargs)

    @event.listens_for(engine, "connect")
    def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    return engine
