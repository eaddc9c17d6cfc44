"""With the registry database unreachable, every service keeps serving on its cached
config, and picks up changes again once the database is back."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from figures import report
from router_platform import E2E, run_e2e
from services import create_postgres_database, drop_postgres_database
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from ferryman.tensors import encode
from ferryman.v1 import common_pb2, inference_pb2, inference_pb2_grpc
from ferryman_server.gpu_node.demo import echo
from ferryman_server.registry.db import normalize_url

# Left out of make test-fast: the registry taken away for seconds.
pytestmark = pytest.mark.slow

OUTAGE_S = 4.0  # several refresh periods of every service


@pytest.fixture
def platform_on_postgres(postgres_admin_url: str, tmp_path: Path) -> Iterator[tuple[E2E, str]]:
    url = create_postgres_database(postgres_admin_url)
    try:
        with run_e2e(tmp_path, registry_url=url) as platform:
            yield platform, url
    finally:
        set_connections(postgres_admin_url, url, allowed=True)
        drop_postgres_database(postgres_admin_url, url)


def set_connections(admin_url: str, url: str, *, allowed: bool) -> None:
    """Open or close the database to new connections; closing also ends the open ones."""
    name = make_url(url).database
    admin = create_engine(normalize_url(admin_url), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS {str(allowed).lower()}'))
        if not allowed:
            conn.execute(
                text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :name"),
                {"name": name},
            )
    admin.dispose()


def predict(platform: E2E) -> str:
    stub = inference_pb2_grpc.InferenceStub(grpc.insecure_channel(platform.router))
    request = inference_pb2.PredictRequest(
        model="echo",
        inputs=[common_pb2.NamedTensor(name="input", tensor=encode(np.ones((1, echo.WIDTH), np.float32)))],
    )
    response = stub.Predict(
        request, metadata=(("authorization", f"Bearer {platform.keys['acme']}"),), timeout=30
    )
    return str(response.version)


def test_serving_continues_while_the_registry_is_down(
    platform_on_postgres: tuple[E2E, str], postgres_admin_url: str
) -> None:
    platform, url = platform_on_postgres
    assert predict(platform) == "1"
    set_connections(postgres_admin_url, url, allowed=False)
    try:
        probe = create_engine(normalize_url(url))
        with pytest.raises(OperationalError):  # the database really is unreachable
            probe.connect()
        probe.dispose()
        answered = 0
        ends = time.monotonic() + OUTAGE_S
        while time.monotonic() < ends:
            assert predict(platform) == "1"
            answered += 1
            time.sleep(0.1)
        assert answered > 10
    finally:
        set_connections(postgres_admin_url, url, allowed=True)
    # Back: a config change made now reaches the router again.
    platform.writer.set_route("echo", {"1": 0, "slow": 100})
    changed_at = time.monotonic()
    while predict(platform) != "slow":
        assert time.monotonic() < changed_at + 10, "the router never saw the change made after the outage"
        time.sleep(0.2)
    report(
        "registry database down",
        outage_s=OUTAGE_S,
        answered_during_outage=answered,
        change_seen_after_s=round(time.monotonic() - changed_at, 2),
    )
