"""The Prometheus endpoint every service can expose (``--metrics-listen host:port``).

prometheus_client's own server gives each connection a thread that waits on it for as long
as the client likes: a few hundred silent connections would pin as many threads. This one
serves the same app under a ``ConnectionGuard``: a connection must send its request headers
within ``handshake_timeout_s`` (a reaper ends those that do not), and past the port's bound
the one that has waited longest for a request is shed, so a scraper is served whatever
else is connected.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
import time
import weakref
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import CollectorRegistry, ProcessCollector, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from ferryman_server.kernel.connections import ConnectionGuard, GuardLimits, Phase

MAX_CONNECTIONS = 64
"""Connections a metrics port keeps: its clients are a few scrapers and the console."""
MAX_HEADER_BYTES = 16 * 1024
"""A scrape's request line and headers are a few hundred bytes."""
BACKLOG = 1024
"""Connections the kernel queues before they are accepted (socketserver's default, 5, turns
a burst of connections into SYN retries of a second and more, a scraper's among them)."""
REAPS_PER_TIMEOUT = 4
"""How often within one header deadline the reaper looks for connections past theirs."""


class _Handler(WSGIRequestHandler):
    """Tells the server when a request's headers are in (a scrape has no body)."""

    server: GuardedServer

    def parse_request(self) -> bool:
        parsed = super().parse_request()
        if parsed:
            self.server.headers_read(self.request)
        return parsed

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not logged."""


class GuardedServer(ThreadingWSGIServer):
    """A thread per connection, at most ``MAX_CONNECTIONS`` of them, none past its deadline."""

    request_queue_size = BACKLOG

    def __init__(self, address: tuple[str, int], handler: Any, timeout_s: float) -> None:
        host = address[0].strip("[]")
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        super().__init__((host, address[1]), handler)
        limits = GuardLimits(
            max_connections=MAX_CONNECTIONS,
            max_per_peer=MAX_CONNECTIONS,
            header_timeout_s=timeout_s,
            body_timeout_s=timeout_s,
            max_header_bytes=MAX_HEADER_BYTES,
        )
        self._guard: ConnectionGuard[socket.socket] = ConnectionGuard(limits)
        self._lock = threading.Lock()
        self._deadlines: dict[socket.socket, float] = {}
        self._stopped = threading.Event()
        self._reaper = threading.Thread(
            target=self._reap, args=(timeout_s / REAPS_PER_TIMEOUT,), name="metrics-reaper", daemon=True
        )
        self._reaper.start()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lock:
            admission = self._guard.opened(request, str(client_address[0]))
            for victim in admission.shed:
                self._end(victim)
            if not admission.refused:
                self._deadlines[request] = time.monotonic() + self._guard.limits.header_timeout_s
        if admission.refused:
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def headers_read(self, request: socket.socket) -> None:
        with self._lock:
            self._deadlines.pop(request, None)
            if self._guard.entered(request, Phase.BODY) is not None:
                self._guard.entered(request, Phase.SERVING)

    def shutdown_request(self, request: Any) -> None:
        with self._lock:
            self._guard.closed(request)
            self._deadlines.pop(request, None)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (or was shed) mid-request is no error of the server's;
        anything else is reported as socketserver does."""
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)

    def shutdown(self) -> None:
        self._stopped.set()
        super().shutdown()

    def _end(self, request: socket.socket) -> None:
        """Wake the thread reading ``request`` (its read returns nothing); it then closes it."""
        self._guard.closed(request)
        self._deadlines.pop(request, None)
        with contextlib.suppress(OSError):  # already gone
            request.shutdown(socket.SHUT_RDWR)

    def _reap(self, every_s: float) -> None:
        while not self._stopped.wait(every_s):
            now = time.monotonic()
            with self._lock:
                for request in [r for r, deadline in self._deadlines.items() if deadline <= now]:
                    self._end(request)


_WITH_PROCESS: weakref.WeakSet[CollectorRegistry] = weakref.WeakSet()
"""Registries given the ``process_*`` collector already."""
_PROCESS_LOCK = threading.Lock()


def with_process_metrics(registry: CollectorRegistry) -> None:
    """Add the standard ``process_*`` metrics (CPU, memory, open files, start time) to
    ``registry`` once: the Prometheus endpoint and the OTLP pusher both want them, and a
    registry that does not describe its collectors takes a second copy without a word
    (every family twice: ``promtool check metrics`` fails)."""
    with _PROCESS_LOCK:
        if registry not in _WITH_PROCESS:
            ProcessCollector(registry=registry)
            _WITH_PROCESS.add(registry)


def serve_metrics(listen: str, registry: CollectorRegistry, timeout_s: float) -> WSGIServer | None:
    """Serve ``registry`` at http://listen/metrics in a daemon thread, with the standard
    ``process_*`` metrics (CPU, memory, open files, start time) beside it; a connection
    sends its request within ``timeout_s``. None when ``listen`` is empty."""
    if not listen:
        return None
    with_process_metrics(registry)
    host, _, port = listen.rpartition(":")
    server = GuardedServer((host or "0.0.0.0", int(port)), _Handler, timeout_s)
    server.set_app(make_wsgi_app(registry))
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
