"""A TTL response cache with a size bound (opt-in per cacheable version)."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Generic, TypeVar

V = TypeVar("V")


@dataclass
class TTLCache(Generic[V]):
    """Least-recently-used eviction past ``max_entries``; entries expire after ``ttl_s``."""

    ttl_s: float
    max_entries: int
    _entries: OrderedDict[str, tuple[float, V]] = field(default_factory=OrderedDict)

    def get(self, key: str, now: float) -> V | None:
        found = self._entries.get(key)
        if found is None:
            return None
        stored_at, value = found
        if now - stored_at > self.ttl_s:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return value

    def put(self, key: str, value: V, now: float) -> None:
        self._entries[key] = (now, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)
