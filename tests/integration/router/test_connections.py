"""Half-open connections do not pile up: a client that vanished (it never answers the
server's keepalive pings, as a crashed host or a cut network never does) is dropped within
the keepalive period plus its timeout, while with keepalive long it stays."""

from __future__ import annotations

import socket
import time

from harness import ServiceThread
from router_platform import E2E

from ferryman_server.quota.cohost import CoHostedQuota
from ferryman_server.quota.settings import QuotaSettings
from ferryman_server.router.server import serve_router
from ferryman_server.router.settings import RouterSettings

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
EMPTY_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
SETTINGS_ACK = b"\x00\x00\x00\x04\x01\x00\x00\x00\x00"
"""An HTTP/2 client's opening (preface, its settings, the ack of the server's): a connection
set up as any client's, before it goes silent."""
SHORT = {"keepalive_s": 1.0, "keepalive_timeout_s": 1.0}
WAIT_S = 8.0


def silent_client(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    sock.sendall(PREFACE + EMPTY_SETTINGS)
    sock.settimeout(5.0)
    sock.recv(65536)  # the server's SETTINGS
    sock.sendall(SETTINGS_ACK)
    return sock


def closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the server closes the connection within ``seconds`` (what it sends is read
    and never answered: no SETTINGS ack, no PING ack)."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            if not sock.recv(65536):
                return True
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True
    return False


def router(e2e: E2E, **common: float) -> tuple[str, ServiceThread]:
    settings = RouterSettings(listen="127.0.0.1:0", batchers=e2e.batcher)
    shared = e2e.common.model_copy(update=common)
    thread = ServiceThread(
        lambda stop, ready: serve_router(settings, CoHostedQuota(QuotaSettings()), shared, stop, ready),
        "router",
    )
    return thread.start(), thread


def test_a_vanished_client_is_dropped_after_keepalive_plus_timeout(e2e: E2E) -> None:
    address, thread = router(e2e, **SHORT)
    try:
        with silent_client(address) as sock:
            started = time.monotonic()
            assert closed_within(sock, WAIT_S), "the server kept a silent connection"
            assert time.monotonic() - started >= SHORT["keepalive_s"]
    finally:
        thread.stop()


def test_with_a_long_keepalive_the_silent_connection_stays(e2e: E2E) -> None:
    address, thread = router(e2e)  # the defaults: 30 s + 10 s
    try:
        with silent_client(address) as sock:
            assert not closed_within(sock, WAIT_S / 2)
    finally:
        thread.stop()
