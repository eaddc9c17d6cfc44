"""The console's port under a slowloris flood: ``ferryman admin`` serves Streamlit under a
connection guard, so with 1,100 half-open connections its health check and pages answer,
every half-open connection is closed within its bound, and a session's WebSocket (which
lives far longer than any header deadline) stays open. Part of the abuse suite."""

from __future__ import annotations

import asyncio
import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import websockets
from console_app import console_healthy, start_console
from half_open import all_closed, half_open

from ferryman_server.kernel.net import free_port
from ferryman_server.registry.db import make_engine
from ferryman_server.registry.migrate import upgrade

# Left out of make test-fast: starts the console as a process.
pytestmark = [pytest.mark.slow, pytest.mark.abuse]

HALF_OPEN = 1100
BOUND_S = 2.0
CLOSED_WITHIN_S = 20.0
START_TIMEOUT_S = 60.0
OUTLIVES_S = 3 * BOUND_S
PER_PEER = 8
"""A small bound per client address: sessions that ended must not keep counting against it."""


@pytest.fixture
def console(tmp_path: Path) -> Iterator[str]:
    """A console (``ferryman admin``) with a 2 s header deadline: its host:port."""
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    upgrade(make_engine(url))
    port = free_port()
    env = {
        **os.environ,
        "FERRYMAN_DATABASE_URL": url,
        "FERRYMAN_DATA_DIR": str(tmp_path),
        "FERRYMAN_CONSOLE_HEADER_TIMEOUT_S": str(BOUND_S),
        "FERRYMAN_CONSOLE_MAX_CONNECTIONS_PER_PEER": str(PER_PEER),
    }
    proc = start_console(port, env)
    address = f"127.0.0.1:{port}"
    yield address
    proc.terminate()
    proc.wait(10)


async def session_outlives_the_bound(address: str) -> bool:
    """A browser session's WebSocket, held past several header deadlines, still answers."""
    async with websockets.connect(f"ws://{address}/_stcore/stream", subprotocols=["streamlit"]) as ws:  # type: ignore[list-item]
        await asyncio.sleep(OUTLIVES_S)
        pong = await ws.ping()
        await asyncio.wait_for(pong, timeout=5)
        return True


def test_half_open_connections_leave_the_console_served(console: str) -> None:
    flood = half_open(console, HALF_OPEN, (b"", b"GET /_stc", b"GET / HTTP/1.1\r\nHost: x\r\n"))
    try:
        assert all(console_healthy(console) for _ in range(5))
        with urllib.request.urlopen(f"http://{console}/", timeout=10) as page:
            assert page.status == 200 and b"<html" in page.read().lower()
    finally:
        closed = all_closed(flood, CLOSED_WITHIN_S)
    assert closed == HALF_OPEN, f"{HALF_OPEN - closed} half-open connections outlived their bound"
    assert asyncio.run(session_outlives_the_bound(console))


def test_ended_sessions_do_not_count_against_their_address(console: str) -> None:
    """A WebSocket leaves the guard with its upgrade: twice the per-address bound of
    sessions, one after another, and the address is still served."""
    for _ in range(2 * PER_PEER):
        asyncio.run(one_session(console))
    assert console_healthy(console)


async def one_session(address: str) -> None:
    async with websockets.connect(f"ws://{address}/_stcore/stream", subprotocols=["streamlit"]) as ws:  # type: ignore[list-item]
        await asyncio.wait_for(await ws.ping(), timeout=5)
