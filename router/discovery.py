"""Which batchers stand behind the configured addresses. An IP literal is one batcher; a
name (a Kubernetes headless Service) stands for every address it resolves to, re-read every
``batcher_discovery_s``. The router then owns each model to one batcher *pod* by
rendezvous, the same one in every router, so batches fill and duplicates coalesce across
routers; dialling the name alone would let the cluster's connection balancing spread a
model over every batcher."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

log = logging.getLogger("ferryman.router.discovery")

Resolver = Callable[[str, int], Awaitable[list[str]]]
"""host, port -> the IP addresses the host stands for."""


@dataclass(frozen=True, order=True)
class Member:
    """One batcher: the address dialled and, when it came from a name, that name (what a
    TLS certificate names, since the dialled host is an IP)."""

    address: str
    name: str = ""


def split(address: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` -> (host, port)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"batcher address {address!r} is not host:port")
    return host.strip("[]"), int(port)


def join(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def is_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


async def system_resolver(host: str, port: int) -> list[str]:
    """The resolver's answer (A and AAAA records), as the system's getaddrinfo gives it."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


async def resolve(
    configured: list[str],
    resolver: Resolver,
    previous: Mapping[str, list[Member]],
    timeout_s: float,
) -> dict[str, list[Member]]:
    """Members per configured entry. A name that fails to resolve, or resolves to nothing,
    keeps what it had (a DNS hiccup must not move every model), or, never resolved yet, is
    dialled by name."""
    members: dict[str, list[Member]] = {}
    for entry in configured:
        host, port = split(entry)
        if is_literal(host):
            members[entry] = [Member(entry)]
            continue
        try:
            ips = await asyncio.wait_for(resolver(host, port), timeout_s)
        except (OSError, TimeoutError) as exc:
            log.warning("could not resolve batcher name %s (keeping the last answer): %s", host, exc)
            ips = []
        resolved = sorted({Member(join(ip, port), host) for ip in ips})
        members[entry] = resolved or list(previous.get(entry, [Member(entry)]))
    return members


def flatten(members: Mapping[str, list[Member]]) -> list[Member]:
    """Every member once, in a stable order."""
    return sorted({m for group in members.values() for m in group})
