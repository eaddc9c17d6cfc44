"""Small network helpers shared by services, the CLI and tests."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free now (for tests and local multi-process setups)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def free_ports(count: int, host: str = "127.0.0.1") -> int:
    """A port p such that p .. p + count - 1 are all free now (a router's workers serve
    metrics on consecutive ports)."""
    while True:
        base = free_port(host)
        held: list[socket.socket] = []
        try:
            for port in range(base, base + count):
                held.append(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
                held[-1].bind((host, port))
            return base
        except OSError:
            continue
        finally:
            for sock in held:
                sock.close()


def cannot_listen(listen: str, detail: str = "") -> OSError:
    """The one error for an address a server cannot bind (held by another process, or not local)."""
    suffix = f" ({detail})" if detail else ""
    return OSError(f"cannot listen on {listen}: the address is in use or not local{suffix}")


def check_listenable(listen: str) -> None:
    """Raise OSError with a clear message when ``host:port`` cannot be bound now (held by
    another process, or not a local address)."""
    host, _, port = listen.rpartition(":")
    with socket.socket(socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET) as sock:
        # As gRPC does: a port in TIME_WAIT is free, one with a listener is not.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host.strip("[]") or "0.0.0.0", int(port)))
        except (OSError, ValueError) as exc:
            raise cannot_listen(listen, str(exc)) from None
