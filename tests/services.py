"""Start and stop real service processes (Redis) for tests, by PID."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import NoReturn

import pytest
import redis
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from ferryman_server.registry.db import normalize_url

SERVICE_START_TIMEOUT_S = 10.0


def start_redis(
    port: int, workdir: Path, *, aof: bool = False, maxmemory: str = ""
) -> subprocess.Popen[bytes]:
    """A private redis-server on 127.0.0.1:port; with ``aof`` it keeps an append-only file
    in ``workdir`` (fsync every write), otherwise nothing on disk; with ``maxmemory`` it
    holds at most that and refuses writes past it (``noeviction``, as the chart's)."""
    binary = shutil.which("redis-server") or "redis-server"
    return subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "yes" if aof else "no",
            *(["--appendfsync", "always"] if aof else []),
            "--dir",
            str(workdir),
            *(["--maxmemory", maxmemory, "--maxmemory-policy", "noeviction"] if maxmemory else []),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def wait_for_redis(port: int, timeout: float = SERVICE_START_TIMEOUT_S) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        try:
            redis.Redis(host="127.0.0.1", port=port, socket_timeout=0.5).ping()
            return True
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)


def unavailable(reason: str) -> NoReturn:
    """Fail under CI (nothing is skipped silently there), skip elsewhere."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"required test service unavailable: {reason}", pytrace=False)
    pytest.skip(reason)


def create_postgres_database(admin_url: str) -> str:
    """Create an empty database beside ``admin_url``'s and return its URL."""
    name = f"ferryman_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(normalize_url(admin_url), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return make_url(normalize_url(admin_url)).set(database=name).render_as_string(hide_password=False)


def drop_postgres_database(admin_url: str, url: str) -> None:
    name = make_url(url).database
    admin = create_engine(normalize_url(admin_url), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()
