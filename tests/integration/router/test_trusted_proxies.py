"""Behind a trusted reverse proxy (FERRYMAN_TRUSTED_PROXIES) every client arrives from the
proxy's address: the router's per-client connection bound keys on the address the proxy
forwards, so one client past its bound sheds its own connections, never another's. From a
peer that is not trusted, a forwarded header is the client's own claim and counts for nothing.

The proxy here is this test, from 127.0.0.1 with X-Forwarded-For, as nginx sends it
(tests/integration/router/test_ingress.py runs the doors behind nginx itself): with nginx's
pooled upstream connections in between, which client's request lands on which connection is
nginx's choice, and a test of bounds through it was at the mercy of that timing."""

from __future__ import annotations

import json
import socket

import pytest
from router_platform import E2E

from ferryman_server.gpu_node.demo import echo
from ferryman_server.kernel.net import free_port
from ferryman_server.quota.settings import QuotaSettings

pytestmark = [pytest.mark.slow, pytest.mark.abuse]

PER_CLIENT = 2
GUARD_S = 30.0
"""Stops a test that would wait forever; it times nothing."""


def started(http: str, key: str, client: str) -> tuple[socket.socket, bytes]:
    """A request forwarded for ``client`` whose headers are in and whose body is not (it is
    not yet served: the first kind of connection a bound sheds); the rest of its body."""
    body = json.dumps(
        {
            "inputs": [
                {"name": "input", "shape": [1, echo.WIDTH], "datatype": "FP32", "data": [1.0] * echo.WIDTH}
            ]
        }
    ).encode()
    head = (
        f"POST /v2/models/echo/infer HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
        f"X-Forwarded-For: {client}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    host, port = http.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=GUARD_S)
    sock.sendall(head + body[:10])
    return sock, body[10:]


def closed(sock: socket.socket) -> bool:
    """Whether the router closed ``sock``: a shed connection gets a 408 (part of its request
    had come) and its end; one still open gets nothing before its request is whole."""
    said = b""
    try:
        while chunk := sock.recv(4096):
            said += chunk
    except ConnectionResetError:
        return True
    return said.startswith(b"HTTP/1.1 408") or not said


def test_one_client_past_its_bound_sheds_its_own_connections_not_anothers(e2e: E2E) -> None:
    http = f"127.0.0.1:{free_port()}"
    common = e2e.common.model_copy(update={"trusted_proxies": "127.0.0.1"})
    e2e.start_router(
        QuotaSettings(), http_listen=http, http_max_connections_per_peer=PER_CLIENT, common=common
    )
    key = e2e.keys["acme"]
    other, rest = started(http, key, "198.51.100.3")
    first, _ = started(http, key, "198.51.100.2")
    crowd = [started(http, key, "198.51.100.2")[0] for _ in range(PER_CLIENT)]
    try:
        # Past its bound, the client's longest-waiting unserved connection goes...
        assert closed(first), "the client past its bound lost its oldest unserved connection"
        # ...and the other client's, older still, is served once its body comes.
        other.sendall(rest)
        assert other.recv(12) == b"HTTP/1.1 200"
    finally:
        for sock in (other, first, *crowd):
            sock.close()
