"""The HTTP port as an attacker and an unlucky client meet it: a client that hangs up
frees its quota at once, bodies are bounded before they are buffered, and malformed
bodies, binary sections and paths get clear 4xx answers, never a 500 or a hang."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from typing import Any

import numpy as np
from router_platform import E2E

from ferryman_server.gpu_node.demo import echo
from ferryman_server.kernel.net import free_port
from ferryman_server.quota.settings import QuotaSettings
from ferryman_server.registry.specs import QuotaLimits

SLOW_MS = 1500
HANG_UP_AFTER_S = 0.3
RELEASE_WAIT_S = 0.3
SMALL_LIMIT = 64 * 1024
CONNECTION_LIMIT = 4
TIMEOUT_S = 30


def echo_body(value: float, **parameters: Any) -> bytes:
    row = [value] * echo.WIDTH
    document = {
        "parameters": parameters,
        "inputs": [{"name": "input", "datatype": "FP32", "shape": [1, echo.WIDTH], "data": row}],
    }
    return json.dumps(document).encode()


def post(url: str, body: bytes, key: str, **headers: str) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, data=body, headers={"Authorization": f"Bearer {key}", **headers})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def test_a_client_that_hangs_up_frees_its_concurrency_slot_at_once(e2e: E2E) -> None:
    key = e2e.new_tenant("hangup", QuotaLimits(max_concurrency=1))
    host, port = e2e.http.removeprefix("http://").split(":")
    body = echo_body(1.0, delay_ms=SLOW_MS)
    head = (
        f"POST /v2/models/echo/infer HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(head.encode() + body)
        time.sleep(HANG_UP_AFTER_S)  # the slow request holds the tenant's one slot now
    time.sleep(RELEASE_WAIT_S)
    # A slot still held would refuse this at once (429, max_concurrency 1), not queue it.
    status, answer = post(f"{e2e.http}/v2/models/echo/infer", echo_body(2.0), key)
    assert status == 200, f"the slot of the request whose client left was not freed: {answer}"
    np.testing.assert_array_equal(answer["outputs"][0]["data"], [4.0] * echo.WIDTH)


def test_bodies_past_the_limit_are_refused_before_they_are_buffered(e2e: E2E) -> None:
    http = f"127.0.0.1:{free_port()}"
    e2e.start_router(QuotaSettings(), http_listen=http, max_message_bytes=SMALL_LIMIT)
    url, key = f"http://{http}/v2/models/echo/infer", e2e.keys["acme"]
    status, answer = post(url, b"[" + b"0," * SMALL_LIMIT + b"0]", key)
    assert status == 400 and answer["violations"] == [
        {"field": "body", "description": f"larger than {SMALL_LIMIT} bytes"}
    ]
    # A declared length past the limit is refused on the headers alone: no body is awaited.
    host, port = http.split(":")
    with socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as sock:
        sock.sendall(
            f"POST /v1/embeddings HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Length: {10**12}\r\n\r\n".encode()
        )
        assert sock.recv(4096).startswith(b"HTTP/1.1 400")
    status, _ = post(url, echo_body(1.0), key)
    assert status == 200, "the router serves on"


def test_another_tenants_private_model_is_unknown_to_every_catalogue_route(e2e: E2E) -> None:
    headers = {"Authorization": f"Bearer {e2e.keys['acme']}"}
    for path in ("", "/ready", "/config", "/stats", "/versions/1", "/versions/1/ready"):
        request = urllib.request.Request(f"{e2e.http}/v2/models/secret{path}", headers=headers)
        try:
            urllib.request.urlopen(request, timeout=TIMEOUT_S)
            raise AssertionError(f"/v2/models/secret{path} answered")
        except urllib.error.HTTPError as error:
            assert error.code == 404 and json.loads(error.read())["reason"] == "UNKNOWN_MODEL", path
    request = urllib.request.Request(f"{e2e.http}/v1/models/secret", headers=headers)
    try:
        urllib.request.urlopen(request, timeout=TIMEOUT_S)
        raise AssertionError("/v1/models/secret answered")
    except urllib.error.HTTPError as error:
        assert error.code == 404


def test_idle_connections_at_the_limit_make_room_and_only_served_ones_refuse(e2e: E2E) -> None:
    """Idle connections at the limit: a new one sheds the longest-waiting and is served.
    Every connection inside a request: a new one is refused 503 (the port is really full)."""
    http = f"127.0.0.1:{free_port()}"
    e2e.start_router(
        QuotaSettings(),
        http_listen=http,
        http_max_connections=CONNECTION_LIMIT,
        http_max_connections_per_peer=CONNECTION_LIMIT,
    )
    host, port = http.split(":")
    idle = [socket.create_connection((host, int(port)), timeout=TIMEOUT_S) for _ in range(CONNECTION_LIMIT)]
    try:
        time.sleep(0.2)  # accepted: each holds a place without sending a byte
        with urllib.request.urlopen(f"http://{http}/v2/health/live", timeout=TIMEOUT_S) as live:
            assert live.status == 200, "served past the idle connections"
        assert idle[0].recv(1) == b"", "the longest-waiting connection was shed"
    finally:
        for sock in idle:
            sock.close()
    url, key = f"http://{http}/v2/models/echo/infer", e2e.keys["acme"]
    body = echo_body(1.0, delay_ms=SLOW_MS)
    busy = []
    for _ in range(CONNECTION_LIMIT):
        sock = socket.create_connection((host, int(port)), timeout=TIMEOUT_S)
        sock.sendall(
            b"POST /v2/models/echo/infer HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (key.encode(), len(body), body)
        )
        busy.append(sock)
    try:
        time.sleep(SLOW_MS / 1000 / 3)  # read whole and being served
        status, _ = post(url, echo_body(1.0), key)
        assert status == 503, "every connection is being served: the port is full"
    finally:
        for sock in busy:
            assert sock.recv(65536).startswith(b"HTTP/1.1 200"), "the served ones were answered"
            sock.close()


def test_statistics_of_every_model_answer_at_their_own_path(e2e: E2E) -> None:
    """/v2/models/stats is Triton's all-models statistics, not the metadata of a model named "stats"."""
    key = e2e.new_tenant("stats")
    status, _ = post(f"{e2e.http}/v2/models/echo/infer", echo_body(1.0), key)
    assert status == 200
    request = urllib.request.Request(
        f"{e2e.http}/v2/models/stats", headers={"Authorization": f"Bearer {key}"}
    )
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
        stats = json.loads(answer.read())["model_stats"]
    echo_stats = [s for s in stats if s["name"] == "echo"]
    assert [s["version"] for s in echo_stats] == ["1"] and echo_stats[0]["inference_count"] == 1
    assert all(s["inference_count"] == 0 or s["name"] == "echo" for s in stats), (
        "this tenant's own requests only"
    )


def test_malformed_bodies_and_binary_sections_get_clear_refusals(e2e: E2E) -> None:
    url, key = f"{e2e.http}/v2/models/echo/infer", e2e.keys["acme"]
    status, answer = post(url, b"{not json", key)
    assert status == 400 and answer["reason"] == "INVALID_REQUEST"
    good = echo_body(1.0)
    status, answer = post(url, good, key, **{"Inference-Header-Content-Length": str(len(good) + 10)})
    assert status == 400 and "Inference-Header-Content-Length" in answer["error"]
    binary = {
        "inputs": [
            {
                "name": "input",
                "datatype": "FP32",
                "shape": [1, echo.WIDTH],
                "parameters": {"binary_data_size": 16},
            }
        ]
    }
    header = json.dumps(binary).encode()
    status, answer = post(
        url, header + b"\x00" * 12, key, **{"Inference-Header-Content-Length": str(len(header))}
    )
    assert status == 400 and answer["violations"][0]["field"] == "inputs[0].parameters.binary_data_size"
    status, answer = post(
        url, header + b"\x00" * 20, key, **{"Inference-Header-Content-Length": str(len(header))}
    )
    assert status == 400 and "belong to no input" in answer["error"]
    refused: list[list[list[int]]] = [[[1, -1]], [[]], [[100256]], [[10**30]]]
    for tokens in refused:
        status, answer = post(
            f"{e2e.http}/v1/embeddings", json.dumps({"model": "minilm", "input": tokens}).encode(), key
        )
        assert status == 400 and answer["error"]["param"] == "input", (tokens, answer)
        assert len(answer["error"]["message"]) < 200
    status, answer = post(
        f"{e2e.http}/v1/embeddings", json.dumps({"model": "mlp", "input": "x"}).encode(), key
    )
    assert status == 400 and answer["error"]["param"] == "model"
    status, answer = post(
        f"{e2e.http}/v2/models/echo/infer", json.dumps({"inputs": [{"name": "input"}] * 17}).encode(), key
    )
    assert status == 400 and any(v["field"] == "inputs" for v in answer["violations"])
    with urllib.request.urlopen(f"{e2e.http}/v2/health/live", timeout=TIMEOUT_S) as live:
        assert json.loads(live.read()) == {"live": True}
    try:
        urllib.request.urlopen(f"{e2e.http}/v3/nothing", timeout=TIMEOUT_S)
    except urllib.error.HTTPError as error:
        assert error.code == 404
