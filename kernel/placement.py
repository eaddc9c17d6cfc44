"""Where a version goes when it is wanted and placed nowhere: pure decisions over what the
nodes report of their memory.

A node owns its memory accounting (it alone knows what it holds and when each version last
ran): it refuses a load that does not fit and evicts with ``victims``. A batcher picks the
node with ``place`` from the nodes' own reports, so both sides apply the one rule: a
version may only push out unpinned, idle versions, least recently used first, and what a
node holds never exceeds its budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Held:
    """One version a node holds."""

    key: str
    """``model:version``."""
    bytes: int
    """What it holds there (measured at load; the estimate while it loads)."""
    idle_s: float
    """Seconds since it last ran a batch or a generation (or since it loaded)."""
    pinned: bool = False
    """Placed there by the registry (``ferryman model place``): never evicted."""
    busy: bool = False
    """Running something, or still loading: not evictable now."""

    @property
    def evictable(self) -> bool:
        return not self.pinned and not self.busy


@dataclass(frozen=True)
class NodeRoom:
    """A node's memory as it reports it."""

    name: str
    budget: int
    """Bytes its versions may hold together."""
    held: tuple[Held, ...] = ()

    @property
    def used(self) -> int:
        return sum(h.bytes for h in self.held)

    def holds(self, key: str) -> bool:
        return any(h.key == key for h in self.held)


@dataclass(frozen=True)
class Placement:
    """Load the version on ``node`` after evicting ``evict`` (least recently used first)."""

    node: str
    evict: tuple[str, ...] = ()


def victims(room: NodeRoom, need: int) -> tuple[str, ...] | None:
    """What ``room`` evicts so that ``need`` more bytes fit: its evictable versions, least
    recently used first, as few as make room; None when even all of them would not."""
    free = room.budget - room.used
    chosen: list[str] = []
    for held in sorted((h for h in room.held if h.evictable), key=lambda h: (-h.idle_s, h.key)):
        if free >= need:
            break
        chosen.append(held.key)
        free += held.bytes
    return tuple(chosen) if free >= need else None


def place(rooms: Sequence[NodeRoom], key: str, need: int) -> Placement | None:
    """The node for one more replica of ``key`` (``need`` bytes), or None when no node can
    make room without overcommitting.

    Nodes that already hold ``key`` are passed over (replicas spread). A node where it fits
    as things are wins, the one with most room left first (spread, and headroom for the
    next). Otherwise the eviction whose most recently used victim is the stalest, so the
    fleet's least recently used version goes first; fewer victims break a tie.
    """
    fitting: list[tuple[int, str]] = []
    evicting: list[tuple[float, int, str, tuple[str, ...]]] = []
    for room in rooms:
        if room.holds(key):
            continue
        chosen = victims(room, need)
        if chosen is None:
            continue
        if not chosen:
            fitting.append((room.budget - room.used - need, room.name))
            continue
        idle = {h.key: h.idle_s for h in room.held}
        freshest = min(idle[k] for k in chosen)
        evicting.append((freshest, len(chosen), room.name, chosen))
    if fitting:
        return Placement(min(fitting, key=lambda f: (-f[0], f[1]))[1])
    if evicting:
        _, _, name, chosen = min(evicting, key=lambda e: (-e[0], e[1], e[2]))
        return Placement(name, chosen)
    return None
