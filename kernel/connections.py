"""Who may hold an HTTP connection, and for how long: slow and idle clients cannot close a
port (slowloris).

A connection is in one phase at a time: WAITING for a request's headers (just opened, or
between two requests on a keep-alive connection), reading a request's BODY, or SERVING it.
Each phase but SERVING has a deadline; a connection that misses it is closed. Past the
port's connection bound, or one peer's, a connection not yet served is shed to make room
for the new one: the one that has waited longest for a request, else the one that has
been sending its body longest. A flood of half-open connections (or of trickled bodies)
sheds itself, and a client that sends its request at once is served however many wait.
Only when every connection is being served does the port refuse (503, the router's load
answer), and a peer already holding its bound of requests in service gets no more.

``ConnectionGuard`` is the policy, a pure function of what it is told (not thread-safe:
a threaded server holds a lock around it). The router's HTTP door
(``ferryman_server.kernel.http_guard``), the console and the metrics port
(``ferryman_server.kernel.metrics_http``)
tell it and act on its answers.
"""

from __future__ import annotations

import enum
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

C = TypeVar("C", bound=Hashable)


class Phase(enum.Enum):
    WAITING = "waiting"
    """No request under way: headers may come (deadline: ``header_timeout_s``)."""
    BODY = "body"
    """Headers read, the body still coming (deadline: ``body_timeout_s``)."""
    SERVING = "serving"
    """The whole request read; the router answers within the request's own deadline."""


TRANSITIONS: dict[Phase, frozenset[Phase]] = {
    Phase.WAITING: frozenset({Phase.BODY}),
    # Answered before its body was all read (a refusal): waiting for the next request.
    Phase.BODY: frozenset({Phase.SERVING, Phase.WAITING}),
    # A pipelined request's headers may come while the one before it is served.
    Phase.SERVING: frozenset({Phase.WAITING, Phase.BODY}),
}
"""How a connection moves: a request's headers, its body, its answer, the next request."""


@dataclass(frozen=True)
class GuardLimits:
    """The bounds of one HTTP port."""

    max_connections: int
    max_per_peer: int
    header_timeout_s: float
    body_timeout_s: float
    max_header_bytes: int
    write_timeout_s: float = 30.0
    """An answer being sent to a client that reads none of it (its socket's buffers full)
    for this long is cut: a reader that never reads holds nothing for long."""
    refused_timeout_s: float = 1.0
    """A connection refused for its peer's bound is answered 503 if its headers come within
    this, and closed either way (not held until the header deadline)."""


@dataclass(frozen=True)
class Admission:
    """What to do about a new connection: close ``shed`` (those that waited longest), and
    keep the new one unless ``refused``."""

    shed: list[Any] = field(default_factory=list)
    refused: bool = False


class ConnectionGuard(Generic[C]):
    """The connections of one port: their peers and phases, and who goes when it is full."""

    def __init__(self, limits: GuardLimits) -> None:
        self.limits = limits
        self._peer: dict[C, str] = {}
        self._phase: dict[C, Phase] = {}
        self._unserved: dict[Phase, OrderedDict[C, None]] = {
            Phase.WAITING: OrderedDict(),
            Phase.BODY: OrderedDict(),
        }
        """Connections not yet served, by phase, longest in it first (shed in this order)."""
        self._per_peer: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self._peer)

    def opened(self, conn: C, peer: str, *, bounded: bool = True) -> Admission:
        """A new connection from ``peer``: it waits for its first request. ``bounded``
        False: ``peer`` is a trusted proxy, which carries many clients' connections: only
        the port's bound applies until a request says whose it is (``reassign``)."""
        self._peer[conn] = peer
        self._phase[conn] = Phase.WAITING
        self._unserved[Phase.WAITING][conn] = None
        self._per_peer[peer] += 1
        shed: list[C] = []
        if bounded:
            refused = self._bound_peer(conn, peer, shed)
            if refused:
                self.closed(conn)
                return Admission(shed, refused=True)
        while len(self._peer) > self.limits.max_connections:
            victim = self._shed_one(lambda _: True, conn)
            if victim is None:
                break  # every other connection is being served: the new one gets a 503
            shed.append(victim)
        return Admission(shed)

    def reassign(self, conn: C, peer: str, *, bounded: bool = True) -> Admission:
        """``conn``'s request is ``peer``'s (a trusted proxy said so): it counts against that
        peer's bound from now on, and past it that peer's own unserved connections are shed,
        or, all of them being served, ``conn`` is refused (it stays known until closed).
        ``bounded`` False: back to its proxy between requests, counted against no client."""
        before = self._peer.get(conn)
        if before is None or before == peer:
            return Admission()
        self._per_peer[before] -= 1
        if not self._per_peer[before]:
            del self._per_peer[before]
        self._peer[conn] = peer
        self._per_peer[peer] += 1
        shed: list[C] = []
        return Admission(shed, refused=bounded and self._bound_peer(conn, peer, shed))

    def _bound_peer(self, conn: C, peer: str, shed: list[C]) -> bool:
        """Shed ``peer``'s unserved connections (not ``conn``) past its bound into ``shed``;
        True when that is not enough (every other one of its connections is being served)."""
        while self._per_peer[peer] > self.limits.max_per_peer:
            victim = self._shed_one(lambda other: self._peer[other] == peer, conn)
            if victim is None:
                return True
            shed.append(victim)
        return False

    def entered(self, conn: C, phase: Phase) -> float | None:
        """``conn`` moved to ``phase``; the seconds it may stay there (None: no bound here)."""
        current = self._phase.get(conn)
        if current is None:
            return None  # shed or closed already
        if phase not in TRANSITIONS[current]:
            raise ValueError(f"a connection cannot go from {current.value} to {phase.value}")
        self._phase[conn] = phase
        if current in self._unserved:
            self._unserved[current].pop(conn, None)
        if phase in self._unserved:
            self._unserved[phase][conn] = None  # at the back: it has been there least
        if phase == Phase.WAITING:
            return self.limits.header_timeout_s
        return self.limits.body_timeout_s if phase == Phase.BODY else None

    def closed(self, conn: C) -> None:
        """``conn`` is gone (or being shed); forgetting it twice is harmless."""
        peer = self._peer.pop(conn, None)
        if peer is None:
            return
        phase = self._phase.pop(conn)
        if phase in self._unserved:
            self._unserved[phase].pop(conn, None)
        self._per_peer[peer] -= 1
        if not self._per_peer[peer]:
            del self._per_peer[peer]

    def _shed_one(self, eligible: Callable[[C], bool], new: C) -> C | None:
        """Forget and return the first unserved connection (but ``new``) that is ``eligible``."""
        for phase in (Phase.WAITING, Phase.BODY):
            for conn in self._unserved[phase]:
                if conn is not new and eligible(conn):
                    self.closed(conn)
                    return conn
        return None
