"""Test services: a private Redis and a fresh PostgreSQL database per test session.

``FERRYMAN_TEST_REDIS_URL`` / ``FERRYMAN_TEST_DATABASE_URL`` point the tests at
existing services; otherwise a ``redis-server`` is started on a free port and a
fresh database is created on the local PostgreSQL. Under ``CI=true`` a service
that cannot be had fails the run instead of skipping.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import own_threads
from services import (
    SERVICE_START_TIMEOUT_S,
    create_postgres_database,
    drop_postgres_database,
    start_redis,
    unavailable,
    wait_for_redis,
)
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from ferryman_server.kernel.net import free_port
from ferryman_server.registry.db import make_engine, normalize_url
from ferryman_server.registry.migrate import upgrade

# The services run in this process and the tracing tests read their spans from its provider.
os.environ.setdefault("FERRYMAN_TRACE_ENABLED", "true")
# One service token for every service this session starts, in threads and subprocesses.
os.environ.setdefault("FERRYMAN_SERVICE_TOKEN", secrets.token_urlsafe(24))

LOCAL_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
SESSION_PLATFORMS = ("in_process_e2e", "gen")
"""Session fixtures whose ``threads`` a test may add its own routers to."""


@pytest.fixture(autouse=True)
def _own_routers_stop_with_their_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """A router a test starts on a session's platform serves that test only. Left running,
    each polled the registry every 0.1 s (reloading it at every write) to the session's end:
    16 idle ones took 0.3 of a core, 0.6 while tenants were being added."""
    with contextlib.ExitStack() as stack:
        for name in SESSION_PLATFORMS:
            if name in request.fixturenames:
                stack.enter_context(own_threads(request.getfixturevalue(name).threads))
        yield


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a Redis only this test session uses."""
    if url := os.environ.get("FERRYMAN_TEST_REDIS_URL"):
        yield url
        return
    if shutil.which("redis-server") is None:
        unavailable("redis-server not installed")
    port = free_port()
    proc = start_redis(port, tmp_path_factory.mktemp("redis"))
    try:
        if not wait_for_redis(port):
            unavailable(f"redis-server on port {port} did not start")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=SERVICE_START_TIMEOUT_S)


@pytest.fixture(scope="session")
def postgres_admin_url() -> str:
    """A URL with rights to create databases (the session's own, or the local server)."""
    url = os.environ.get("FERRYMAN_TEST_DATABASE_URL") or LOCAL_POSTGRES
    try:
        probe = create_engine(normalize_url(url), connect_args={"connect_timeout": 3})
        with probe.connect() as conn:
            conn.execute(text("SELECT 1"))
        probe.dispose()
    except Exception as exc:
        unavailable(f"PostgreSQL not reachable at {make_url(url).render_as_string()}: {exc}")
    return url


@pytest.fixture(scope="session")
def postgres_url(postgres_admin_url: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for this test session."""
    url = create_postgres_database(postgres_admin_url)
    yield url
    drop_postgres_database(postgres_admin_url, url)


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty registry database per test, once on SQLite and once on PostgreSQL."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'registry.db'}"
        return
    admin = request.getfixturevalue("postgres_admin_url")
    url = create_postgres_database(admin)
    yield url
    drop_postgres_database(admin, url)


@pytest.fixture
def registry_engine(db_url: str) -> Iterator[Engine]:
    """A migrated registry on each backend."""
    engine = make_engine(db_url)
    upgrade(engine)
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def smollm2_artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2-135M-Instruct converted once for the session (~25 s)."""
    from ferryman_server.gpu_node.demo import smollm2

    return smollm2.build_artifact(tmp_path_factory.mktemp("smollm2") / "smollm2")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``gpu`` need a CUDA device: where there is none (CI), they are deselected
    with a line that says so, never skipped silently."""
    gpu = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu:
        return
    import torch

    if torch.cuda.is_available():
        return
    config.hook.pytest_deselected(items=gpu)
    items[:] = [item for item in items if not item.get_closest_marker("gpu")]
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    line = (
        f"deselected {len(gpu)} gpu test(s): no CUDA device on this machine "
        "(`make gpu-check` runs them where one is)"
    )
    if reporter is not None:
        reporter.write_line(line)
