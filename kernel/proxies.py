"""Who the client is behind a reverse proxy: from a trusted proxy's peer address, the client
address it forwarded (``Forwarded``'s ``for=``, else ``X-Forwarded-For``); from anyone else,
the peer itself (a header from an untrusted peer is the client's own say, and ignored).

Pure functions of the peer, the headers and the trusted networks
(``FERRYMAN_TRUSTED_PROXIES``); the HTTP guard and the console key their per-client bounds
and throttles by what they return.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

MAX_HOPS = 32
"""Forwarded addresses read at most, the nearest ones (a header is the client's to make as
long as it likes; what trusted proxies appended is at its end)."""


def networks(spec: str) -> tuple[Network, ...]:
    """``spec``: CIDRs (or single addresses), separated by commas or spaces."""
    return tuple(ipaddress.ip_network(part, strict=False) for part in spec.replace(",", " ").split())


def trusted(address: str, proxies: Sequence[Network]) -> bool:
    """Whether ``address`` is one of ``proxies``."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in net for net in proxies)


def _forwarded_for(value: str) -> list[str]:
    """The ``for=`` addresses of an RFC 7239 ``Forwarded`` header, nearest the client first."""
    found: list[str] = []
    for element in value.rsplit(",", MAX_HOPS)[-MAX_HOPS:]:
        for pair in element.split(";"):
            name, _, raw = pair.strip().partition("=")
            if name.strip().lower() != "for":
                continue
            node = raw.strip().strip('"')
            if node.startswith("["):  # "[2001:db8::1]:4711"
                node = node[1 : node.find("]")] if "]" in node else node[1:]
            elif node.count(":") == 1:  # "192.0.2.1:4711"
                node = node.split(":", 1)[0]
            found.append(node)
    return found


def client_address(peer: str, headers: Iterable[tuple[str, str]], proxies: Sequence[Network]) -> str:
    """The client's address. From a trusted proxy, the forwarded addresses are read from the
    nearest hop back: the first that is not itself a trusted proxy is the client (a client
    may send any header of its own: only what trusted proxies appended is believed); all of
    them trusted, the farthest. From anyone else, or with nothing forwarded, ``peer``."""
    if not proxies or not trusted(peer, proxies):
        return peer
    forwarded: list[str] = []
    legacy: list[str] = []
    for name, value in headers:
        key = name.lower()
        if key == "forwarded":
            forwarded += _forwarded_for(value)
        elif key == "x-forwarded-for":
            legacy += [part.strip() for part in value.rsplit(",", MAX_HOPS)[-MAX_HOPS:]]
    hops = [h for h in (forwarded or legacy) if h][-MAX_HOPS:]
    for hop in reversed(hops):
        if not trusted(hop, proxies):
            return _valid(hop, peer)
    return _valid(hops[0], peer) if hops else peer


def _valid(address: str, fallback: str) -> str:
    """``address`` when it is an IP address (a proxy forwards nothing else), else ``fallback``:
    what keys a client's bounds is never free text of the client's choosing."""
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        return fallback
