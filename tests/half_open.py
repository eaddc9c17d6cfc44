"""Half-open connections, as a slowloris client holds them: opened, given part of a request
(or nothing), and left; and whether the server closed them within a bound."""

from __future__ import annotations

import contextlib
import socket
import time

CONNECT_TIMEOUT_S = 10.0


def half_open(address: str, count: int, openings: tuple[bytes, ...]) -> list[socket.socket]:
    host, port = address.rsplit(":", 1)
    socks = []
    for i in range(count):
        sock = socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S)
        if opening := openings[i % len(openings)]:
            with contextlib.suppress(OSError):  # shed while opening: the defence working
                sock.sendall(opening)
        socks.append(sock)
    return socks


def all_closed(socks: list[socket.socket], within_s: float) -> int:
    """How many of ``socks`` the server closed within ``within_s`` (what it sends is read)."""
    deadline = time.monotonic() + within_s
    open_ones = list(socks)
    while open_ones and time.monotonic() < deadline:
        still = []
        for sock in open_ones:
            sock.setblocking(False)
            try:
                while data := sock.recv(65536):
                    del data
            except BlockingIOError:
                still.append(sock)
            except OSError:
                pass  # reset: closed
        open_ones = still
        time.sleep(0.1)
    for sock in socks:
        sock.close()
    return len(socks) - len(open_ones)
