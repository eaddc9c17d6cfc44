"""uvicorn's HTTP protocol under a ``ConnectionGuard`` (kernel/connections.py):
every connection and phase told to the guard, what it sheds closed, and a phase that
outlives its deadline ended (408 when part of a request had come). The router's HTTP doors
and the console's web server (Streamlit's uvicorn) run under it; a connection upgraded to
a WebSocket (the console's sessions) leaves the guard with its HTTP request."""

from __future__ import annotations

import socket
import struct
from collections.abc import Sequence
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ferryman_server.kernel.connections import ConnectionGuard, Phase
from ferryman_server.kernel.proxies import Network, client_address, trusted

LINGER_RESET = struct.pack("ii", 1, 0)
"""SO_LINGER on, for 0 s: closing resets the connection and drops what is unsent."""
TIMEOUT_RESPONSE = b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
BUSY_BODY = b'{"error": "too many connections from this address are being served: retry later"}'
BUSY_RESPONSE = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n"
    b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(BUSY_BODY), BUSY_BODY)
)
TOO_LARGE_RESPONSE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
)


def guarded(guard: ConnectionGuard[Any], proxies: Sequence[Network] = ()) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol, telling ``guard`` of every connection and phase and
    closing what it sheds or what misses its phase's deadline. A connection from one of
    ``proxies`` (trusted reverse proxies) is its request's client's, as the proxy forwarded
    it: for the guard's per-client bound and for the application (the ASGI ``client``)."""

    class GuardedProtocol(HttpToolsProtocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._deadline: Any = None
            self._request_bytes = 0
            """Bytes of the request line and headers so far (the request under way)."""
            self._begun = False
            """Some of a request has come since the last answer (a timeout then says 408)."""
            self._refused = False
            """Its peer had its bound of connections being served: its request gets a 503."""
            self._peer = ""
            self._proxy = False
            """The peer is a trusted proxy: each request says whose the connection is."""
            self._stalled: Any = None
            """The write deadline, while the client reads nothing of an answer being sent."""

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._peer = self.client[0] if self.client else ""
            self._proxy = trusted(self._peer, proxies)
            admission = guard.opened(self, self._peer, bounded=not self._proxy)
            for victim in admission.shed:
                victim._close(TIMEOUT_RESPONSE if victim._begun else b"")
            # A refused connection is answered once its headers are in (a client reads a 503
            # it asked for; one sent before its request is often lost to a reset), and given
            # only a moment to send them.
            self._refused = admission.refused
            limits = guard.limits
            self._arm(limits.refused_timeout_s if self._refused else limits.header_timeout_s)

        def connection_lost(self, exc: Exception | None) -> None:
            guard.closed(self)
            self._arm(None)
            self._unstall()
            super().connection_lost(exc)

        def pause_writing(self) -> None:
            super().pause_writing()
            if self._stalled is None:
                self._stalled = self.loop.call_later(guard.limits.write_timeout_s, self._cut)

        def resume_writing(self) -> None:
            self._unstall()
            super().resume_writing()

        def _unstall(self) -> None:
            if self._stalled is not None:
                self._stalled.cancel()
                self._stalled = None

        def _cut(self) -> None:
            """The client read nothing of its answer for the write deadline: drop it with a
            reset (a close, even an abort, would leave the kernel sending what is in its
            buffer to a client that never reads it)."""
            self._stalled = None
            guard.closed(self)
            self._arm(None)
            if self.transport is None or self.transport.is_closing():
                return
            sock = self.transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_RESET)
            self.transport.abort()

        def on_message_begin(self) -> None:
            self._request_bytes = 0
            super().on_message_begin()

        def on_url(self, url: bytes) -> None:
            self._count(len(url))
            super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            self._count(len(name) + len(value))
            super().on_header(name, value)

        def on_headers_complete(self) -> None:
            if self._request_bytes > guard.limits.max_header_bytes:
                return  # refused in data_received, before any of the app runs
            if self._proxy:
                self._forwarded()
            if self._refused:
                self._close(BUSY_RESPONSE)
                return
            self._arm(guard.entered(self, Phase.BODY))
            super().on_headers_complete()

        def on_body(self, body: bytes) -> None:
            if self._request_bytes <= guard.limits.max_header_bytes and not self._refused:
                super().on_body(body)

        def on_message_complete(self) -> None:
            if self._request_bytes > guard.limits.max_header_bytes or self._refused:
                return
            self._arm(guard.entered(self, Phase.SERVING))
            super().on_message_complete()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self._proxy:
                # Between requests a proxy's pooled connection is the proxy's, not its last
                # client's: it counts against no client, and no client's bound sheds it (a
                # connection the proxy was about to reuse, shed, failed that request).
                guard.reassign(self, self._peer, bounded=False)
            if not self.transport.is_closing():
                self._request_bytes = 0
                self._begun = False
                self._arm(guard.entered(self, Phase.WAITING))

        def handle_websocket_upgrade(self) -> None:
            self._arm(None)  # a session's socket lives on: no HTTP deadline applies any more
            guard.closed(self)
            super().handle_websocket_upgrade()

        def data_received(self, data: bytes) -> None:
            self._begun = True
            super().data_received(data)
            if self._request_bytes > guard.limits.max_header_bytes and not self.transport.is_closing():
                self._close(TOO_LARGE_RESPONSE)

        def _forwarded(self) -> None:
            """This request's client, as the trusted proxy forwarded it, holds the connection."""
            headers = [(n.decode("latin-1"), v.decode("latin-1")) for n, v in self.headers]
            client = client_address(self._peer, headers, proxies)
            admission = guard.reassign(self, client)
            for victim in admission.shed:
                victim._close(TIMEOUT_RESPONSE if victim._begun else b"")
            self._refused = self._refused or admission.refused
            self.client = (client, 0)
            self.scope["client"] = self.client

        def _count(self, n: int) -> None:
            self._request_bytes += n

        def _arm(self, seconds: float | None) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None
            if seconds is not None:
                self._deadline = self.loop.call_later(seconds, self._expired)

        def _expired(self) -> None:
            self._deadline = None
            if self.transport is not None and not self.transport.is_closing():
                guard.closed(self)
                self._close(TIMEOUT_RESPONSE if self._begun else b"")

        def _close(self, last_words: bytes) -> None:
            self._arm(None)
            if self.transport.is_closing():
                return
            if last_words:
                self.transport.write(last_words)
            self.transport.close()

    return GuardedProtocol
