"""A node's http(s) artifacts against a real local HTTP server: a good download arrives
checked; a trickling server fails the fetch at its deadline; a wrong digest, a 404, an
artifact larger than the node has room for (declared or not) each fail with a reason; none
leaves anything in the cache."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ferryman_server.gpu_node.fetch import ArtifactCache, FetchError

pytestmark = pytest.mark.abuse

BODY = b"weights " * 4096
ROOM = 256 * 1024
"""The cache's size: more than BODY, less than what the large answers send."""
DEADLINE_S = 1.0
TRICKLE_PAUSE_S = 0.1


class Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/missing":
            self.send_error(404)
            return
        body = b"something else" if self.path == "/wrong" else BODY
        if self.path in ("/large", "/large-unannounced"):
            body = b"x" * (ROOM * 4)
        self.send_response(200)
        if self.path != "/large-unannounced":
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.path == "/trickle":  # a byte at a time, never silent for long: no socket timeout
            for byte in body:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(TRICKLE_PAUSE_S)
            return
        self.wfile.write(body)


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def cache(tmp_path: Path) -> ArtifactCache:
    return ArtifactCache(tmp_path / "cache", max_bytes=ROOM, timeout_s=5.0, deadline_s=DEADLINE_S)


DIGEST = hashlib.sha256(BODY).hexdigest()


def test_a_good_download_arrives_checked(server: str, cache: ArtifactCache) -> None:
    path = cache.local(f"{server}/weights.bin", DIGEST)
    assert path.read_bytes() == BODY


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("/trickle", "not fetched by its deadline"),
        ("/wrong", "the download's sha256 is"),
        ("/missing", "404"),
        ("/large", "do not fit"),
        ("/large-unannounced", "do not fit"),
    ],
)
def test_a_bad_source_fails_the_fetch_with_its_reason_and_leaves_nothing(
    server: str, cache: ArtifactCache, path: str, reason: str
) -> None:
    with pytest.raises(FetchError, match=reason):
        cache.local(f"{server}{path}", DIGEST)
    assert not any(cache.root.iterdir()), list(cache.root.iterdir())
