"""Behind a reverse proxy (nginx, as an ingress) every client is the proxy's address to the
router: with the proxy trusted (FERRYMAN_TRUSTED_PROXIES), the per-client connection bound
keys on the address it forwards, so one client at its bound does not refuse another."""

from __future__ import annotations

import http.client
import json
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import pytest
from router_platform import E2E
from topology import start_nginx

from ferryman_server.kernel.net import free_port
from ferryman_server.quota.settings import QuotaSettings

pytestmark = [pytest.mark.slow, pytest.mark.abuse]

PER_CLIENT = 4
HOLD_MS = 15_000
"""How long each of the first client's requests holds its connection in service: the other
client is served well within it, however loaded the machine."""
GUARD_S = 60.0
"""Stops a test that would wait forever; it times nothing."""


def infer(ingress: str, key: str, source: str, value: float, delay_ms: int = 0) -> int:
    """An OIP REST inference through ``ingress`` from the address ``source``; its status."""
    host, port = ingress.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=GUARD_S, source_address=(source, 0))
    body = {
        "inputs": [{"name": "input", "shape": [1, 4], "datatype": "FP32", "data": [value] * 4}],
        "parameters": {"delay_ms": str(delay_ms)} if delay_ms else {},
    }
    try:
        conn.request(
            "POST",
            "/v2/models/echo/infer",
            json.dumps(body),
            {"authorization": f"Bearer {key}", "content-type": "application/json"},
        )
        return conn.getresponse().status
    finally:
        conn.close()


def test_two_clients_behind_nginx_have_bounds_of_their_own(in_process_e2e: E2E, tmp_path: Path) -> None:
    e2e = in_process_e2e
    http_listen, ingress = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    common = e2e.common.model_copy(update={"trusted_proxies": "127.0.0.1"})
    e2e.start_router(
        QuotaSettings(), http_listen=http_listen, http_max_connections_per_peer=PER_CLIENT, common=common
    )
    key = e2e.keys["acme"]
    with ExitStack() as stack:
        nginx = start_nginx(stack, tmp_path, ingress, [http_listen])
        stack.callback(nginx.wait, 10)
        stack.callback(nginx.terminate)
        deadline = time.monotonic() + GUARD_S
        while True:  # nginx and the router's doors are up
            try:
                if infer(ingress, key, "127.0.0.2", 0.5) == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "nothing answers through nginx"
            time.sleep(0.1)
        held = [
            threading.Thread(target=infer, args=(ingress, key, "127.0.0.2", float(i), HOLD_MS))
            for i in range(PER_CLIENT)
        ]
        for thread in held:
            thread.start()
        # Once the first client's requests are all in service, its next one is refused...
        while infer(ingress, key, "127.0.0.2", 100.0) != 503:
            assert time.monotonic() < deadline, "the first client was never at its bound"
            time.sleep(0.05)
        # ...and another client, through the same proxy, is served meanwhile.
        assert infer(ingress, key, "127.0.0.3", 200.0) == 200
        assert any(thread.is_alive() for thread in held), "checked while the first client was at its bound"
        for thread in held:
            thread.join(GUARD_S)
