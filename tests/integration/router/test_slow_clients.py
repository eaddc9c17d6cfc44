"""Slow and idle clients cannot hold a door (slowloris): with 1,100 half-open connections on
the HTTP port, 500 on the gRPC port and 1,100 on the metrics port, legitimate calls are
answered within their deadline, and every half-open connection is closed within its
bound (a few seconds here; the defaults are 10 s for HTTP headers, 5 s for the gRPC
preface and metrics headers). Part of the abuse suite."""

from __future__ import annotations

import contextlib
import errno
import json
import socket
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
import pytest
from batcher_platform import register
from half_open import all_closed, half_open
from harness import ServiceThread
from router_platform import E2E, ECHO_HANDLER

import ferryman
from ferryman.tensors import encode
from ferryman.v1 import common_pb2, inference_pb2, inference_pb2_grpc
from ferryman_server.gpu_node.demo import echo
from ferryman_server.kernel.net import free_port
from ferryman_server.quota.cohost import CoHostedQuota
from ferryman_server.quota.settings import QuotaSettings
from ferryman_server.router.server import serve_router
from ferryman_server.router.settings import RouterSettings

pytestmark = pytest.mark.abuse

HTTP_HALF_OPEN = 1100
GRPC_HALF_OPEN = 500
METRICS_HALF_OPEN = 1100
BOUND_S = 2.0
"""The header and handshake deadlines of the router under attack."""
CLOSED_WITHIN_S = 20.0
"""Closing is asserted as a property: well past the bound, however loaded the machine."""
LEGIT_CALLS = 20
DEADLINE_S = 10.0
HTTP_OPENINGS = (b"", b"GET /v2/hea", b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Le")
"""Silent, part of a request line, part of the headers."""
GRPC_OPENING = b"PRI * HTTP/2.0\r\n"
"""Part of the HTTP/2 preface."""
STREAMS_PER_CONNECTION = 4
"""The guarded router's FERRYMAN_ROUTER_MAX_STREAMS_PER_CONNECTION."""
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SETTINGS_FRAME, MAX_CONCURRENT_STREAMS = 0x4, 0x3
EMPTY_SETTINGS = bytes([0, 0, 0, SETTINGS_FRAME, 0, 0, 0, 0, 0])
"""A SETTINGS frame with no settings: the client half of the handshake."""


@pytest.fixture(scope="module")
def guarded(e2e: E2E) -> Iterator[tuple[str, str, str]]:
    """A router with short bounds: its gRPC, HTTP and metrics addresses."""
    http, metrics = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    settings = RouterSettings(
        listen="127.0.0.1:0",
        batchers=e2e.batcher,
        http_listen=http,
        metrics_listen=metrics,
        http_header_timeout_s=BOUND_S,
        max_streams_per_connection=STREAMS_PER_CONNECTION,
    )
    common = e2e.common.model_copy(update={"handshake_timeout_s": BOUND_S})
    thread = ServiceThread(
        lambda stop, ready: serve_router(settings, CoHostedQuota(QuotaSettings()), common, stop, ready),
        "router",
    )
    address = thread.start()
    try:
        yield address, http, metrics
    finally:
        thread.stop()


def infer_over_http(http: str, key: str, value: float) -> int:
    body = json.dumps(
        {
            "inputs": [
                {"name": "input", "datatype": "FP32", "shape": [1, echo.WIDTH], "data": [value] * echo.WIDTH}
            ]
        }
    ).encode()
    request = urllib.request.Request(
        f"http://{http}/v2/models/echo/infer", data=body, headers={"Authorization": f"Bearer {key}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=DEADLINE_S) as response:
            assert len(json.loads(response.read())["outputs"][0]["data"]) == echo.WIDTH
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code


def test_half_open_http_connections_leave_real_clients_served(
    e2e: E2E, guarded: tuple[str, str, str]
) -> None:
    _, http, _ = guarded
    flood = half_open(http, HTTP_HALF_OPEN, HTTP_OPENINGS)
    try:
        answers = [infer_over_http(http, e2e.keys["acme"], float(i)) for i in range(LEGIT_CALLS)]
        assert answers == [200] * LEGIT_CALLS
    finally:
        closed = all_closed(flood, CLOSED_WITHIN_S)
    assert closed == HTTP_HALF_OPEN, f"{HTTP_HALF_OPEN - closed} half-open connections outlived their bound"


def test_a_trickling_client_is_closed_at_its_header_deadline(guarded: tuple[str, str, str]) -> None:
    """A byte every half second keeps a read going, not the connection: the deadline is for
    the whole request line and headers."""
    _, http, _ = guarded
    host, port = http.split(":")
    sock = socket.create_connection((host, int(port)), timeout=DEADLINE_S)
    answer = b""
    for byte in b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200:
        try:
            sock.sendall(bytes([byte]))
            sock.settimeout(0.5)
            answer = sock.recv(65536)
        except TimeoutError:
            continue
        except OSError:
            break
        if answer:
            break
    sock.close()
    assert answer.startswith(b"HTTP/1.1 408"), answer[:40]  # its header deadline fired


def test_oversized_headers_are_refused_before_any_work(guarded: tuple[str, str, str]) -> None:
    _, http, _ = guarded
    host, port = http.split(":")
    with socket.create_connection((host, int(port)), timeout=DEADLINE_S) as sock:
        headers = b"".join(b"X-Pad-%d: %s\r\n" % (i, b"a" * 1000) for i in range(100))
        with contextlib.suppress(OSError):  # closed while still sending: read what it said
            sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 431")


def test_half_open_grpc_connections_leave_real_clients_served(
    e2e: E2E, guarded: tuple[str, str, str]
) -> None:
    router, _, _ = guarded
    flood = half_open(router, GRPC_HALF_OPEN, (b"", GRPC_OPENING))
    try:
        x = encode(np.ones((1, echo.WIDTH), np.float32))
        with grpc.insecure_channel(router) as channel:
            stub = inference_pb2_grpc.InferenceStub(channel)
            for _ in range(LEGIT_CALLS):
                answer: inference_pb2.PredictResponse = stub.Predict(
                    inference_pb2.PredictRequest(
                        model="echo", inputs=[common_pb2.NamedTensor(name="input", tensor=x)]
                    ),
                    metadata=(("authorization", f"Bearer {e2e.keys['acme']}"),),
                    timeout=DEADLINE_S,
                )
                assert answer.version
    finally:
        closed = all_closed(flood, CLOSED_WITHIN_S)
    assert closed == GRPC_HALF_OPEN


def test_half_open_metrics_connections_leave_scrapes_served(guarded: tuple[str, str, str]) -> None:
    _, _, metrics = guarded
    flood = half_open(metrics, METRICS_HALF_OPEN, (b"", b"GET /metr"))
    try:
        for _ in range(5):
            with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=DEADLINE_S) as scrape:
                assert b"ferryman_requests" in scrape.read()
    finally:
        closed = all_closed(flood, CLOSED_WITHIN_S)
    assert closed == METRICS_HALF_OPEN


def server_settings(address: str) -> dict[int, int]:
    """The HTTP/2 SETTINGS the server sends a new connection, read off the wire."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=DEADLINE_S) as sock:
        sock.sendall(HTTP2_PREFACE + EMPTY_SETTINGS)
        data = b""
        while True:
            while len(data) < 9:
                data += sock.recv(4096)
            length, kind = int.from_bytes(data[:3], "big"), data[3]
            while len(data) < 9 + length:
                data += sock.recv(4096)
            payload, data = data[9 : 9 + length], data[9 + length :]
            if kind == SETTINGS_FRAME and payload:
                return {
                    int.from_bytes(payload[i : i + 2], "big"): int.from_bytes(payload[i + 2 : i + 6], "big")
                    for i in range(0, length, 6)
                }


def test_a_connection_may_have_only_so_many_calls_in_progress(
    guarded: tuple[str, str, str], e2e: E2E
) -> None:
    """The stream limit is advertised in HTTP/2 SETTINGS, so gRPC's transport, not Python,
    holds a connection to it; an SDK client asking for three times as many calls at once on
    its one channel gets every answer (a stream the server refuses in the race between a
    call's end on each side comes back REFUSED_STREAM, which the SDK retries)."""
    address = guarded[0]
    assert server_settings(address)[MAX_CONCURRENT_STREAMS] == STREAMS_PER_CONNECTION
    calls = 3 * STREAMS_PER_CONNECTION
    rows = [np.full((1, echo.WIDTH), float(i), np.float32) for i in range(calls)]
    with (
        ferryman.Client(address, e2e.keys["acme"], timeout=DEADLINE_S) as client,
        ThreadPoolExecutor(calls) as pool,
    ):
        answers = list(pool.map(lambda x: client.predict("echo", x).outputs["output"], rows))
    assert [float(np.asarray(a).ravel()[0]) for a in answers] == [2.0 * i for i in range(calls)]


STALLED_READERS = 4
ROWS, WIDTH = 64, 16_384
"""A wide echo of 4 MiB (the model's input bound) answers about 19 MB of JSON (each float in
full): more than the sockets' buffers hold (4 MB each way here)."""
WRITE_BOUND_S = 2.0


def wide_status(http: str, request: bytes) -> int:
    """The status of one request (its answer's first bytes)."""
    host, port = http.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=CLOSED_WITHIN_S) as sock:
        sock.sendall(request)
        status = sock.recv(64).split(b" ")[1]
    return int(status)


def test_readers_that_never_read_are_cut_at_the_write_deadline(e2e: E2E) -> None:
    """Clients that ask for a large answer and read none of it are cut once the write
    deadline passes (their connections free), while a client that reads is served."""
    http = f"127.0.0.1:{free_port()}"
    e2e.start_router(QuotaSettings(), http_listen=http, http_write_timeout_s=WRITE_BOUND_S)
    model = f"wide-{uuid.uuid4().hex[:6]}"
    schema = {
        "inputs": [{"name": "input", "dtype": "FP32", "shape": [WIDTH]}],
        "outputs": [{"name": "output", "dtype": "FP32", "shape": [WIDTH]}],
    }
    artifact = echo.write_config(e2e.common.data_dir / f"{model}.json")
    register(e2e.writer, model, "1", artifact, "python", schema, handler=ECHO_HANDLER, max_batch=ROWS)
    e2e.writer.set_route(model, {"1": 100})
    tensor = {
        "name": "input",
        "datatype": "FP32",
        "shape": [ROWS, WIDTH],
        "data": [1.2345678] * (ROWS * WIDTH),
    }
    body = json.dumps({"inputs": [tensor]}).encode()
    request = (
        f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {e2e.keys['acme']}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    deadline = time.monotonic() + CLOSED_WITHIN_S
    while wide_status(http, request) != 200:  # the doors are up, the model placed
        assert time.monotonic() < deadline, f"the wide model never answered: {wide_status(http, request)}"
        time.sleep(0.2)
    host, port = http.rsplit(":", 1)
    readers: list[socket.socket] = []
    try:
        for _ in range(STALLED_READERS):
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # and it reads nothing
            sock.connect((host, int(port)))
            sock.sendall(request)
            readers.append(sock)
        assert infer_over_http(http, e2e.keys["acme"], 2.0) == 200, "a reader is served meanwhile"
        for sock in readers:
            # Cut: the router reset the connection (what it had not sent is dropped).
            deadline = time.monotonic() + CLOSED_WITHIN_S * 3
            while sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != errno.ECONNRESET:
                assert time.monotonic() < deadline, "a reader that reads nothing was never cut"
                time.sleep(0.1)
    finally:
        for sock in readers:
            sock.close()
