"""A TCP relay whose open connections can be frozen: their sockets stay open and nothing
more passes, as when a machine vanishes or a NAT forgets a connection (no FIN, no RST).
New connections relay as usual."""

from __future__ import annotations

import socket
import threading
from types import TracebackType

from ferryman_server.kernel.net import free_port

CHUNK = 65536
POLL_S = 0.05


class Freezer:
    """Relays ``127.0.0.1:<port>`` to ``upstream`` (``host:port``)."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.rsplit(":", 1)
        self._upstream = (host, int(port))
        self.address = f"127.0.0.1:{free_port()}"
        self._server = socket.create_server(("127.0.0.1", int(self.address.rsplit(":", 1)[1])))
        self._server.settimeout(POLL_S)
        self._frozen: list[threading.Event] = []
        self._sockets: list[socket.socket] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.connections = 0
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> Freezer:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join(5)
        with self._lock:
            for sock in self._sockets:
                sock.close()
        self._server.close()

    def freeze(self) -> None:
        """Every connection open now passes nothing more, and is never closed by the relay."""
        with self._lock:
            for frozen in self._frozen:
                frozen.set()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            upstream = socket.create_connection(self._upstream)
            frozen = threading.Event()
            with self._lock:
                self.connections += 1
                self._frozen.append(frozen)
                self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._relay, args=(source, sink, frozen), daemon=True).start()

    def _relay(self, source: socket.socket, sink: socket.socket, frozen: threading.Event) -> None:
        source.settimeout(POLL_S)
        while not self._stop.is_set():
            if frozen.is_set():
                self._stop.wait(POLL_S)  # holds the sockets open, reads nothing
                continue
            try:
                data = source.recv(CHUNK)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data:
                return
            if frozen.is_set():
                continue  # read just as it froze: dropped, as a vanished peer's would be
            try:
                sink.sendall(data)
            except OSError:
                return
