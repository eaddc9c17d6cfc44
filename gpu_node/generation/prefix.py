"""Prefix caching over the engine's fixed slots, scoped by tenant (pure).

A slot's cache still holds what its last sequence computed once that sequence ends. A new
sequence of the *same tenant* whose context starts with those tokens takes that slot and
prefills only the rest: a chat that repeats its system prompt and the conversation so far
computes them once. Free slots are otherwise taken least recently used first, so the
prefixes used last stay longest.

Scoped by tenant because a cache shared across tenants is a timing side channel: tenant B
could time its first token to learn whether tenant A had sent a prompt starting with some
text. Here B's prompt never matches what A left in a slot, so B's time to first token is
that of a cold prompt whatever A sent. (B can still evict A's prefixes by keeping the slots
busy, which tells A nothing about B's prompts and B nothing about A's.)
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

Scope = tuple[str, int]
"""Whose cache it is: a tenant, and the LoRA adapter its tokens ran under (the cache depends
on the adapter: the same tokens under another adapter have other keys and values)."""


@dataclass
class Held:
    """What one slot's cache holds: ``tokens`` at positions 0..len-1, left in ``scope``."""

    scope: Scope = ("", 0)
    tokens: list[int] = field(default_factory=list)
    used: int = 0
    """When it was last taken or left (a logical clock): the least recent is evicted first."""


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class PrefixCache:
    """Which slot a sequence takes, and how much of its context is already cached there."""

    def __init__(self, slots: int, enabled: bool = True) -> None:
        self.enabled = enabled
        self._held = [Held() for _ in range(slots)]
        self._clock = itertools.count(1)
        self.hits = 0
        """Sequences that reused a cached prefix."""
        self.reused_tokens = 0
        """Prompt tokens not computed again."""

    def take(self, free: list[int], scope: Scope, context: list[int]) -> tuple[int, int]:
        """Remove and return the slot from ``free`` for a sequence in ``scope`` that will
        prefill ``context``, and how many of its first tokens that slot already holds (at
        least one token is always left to compute: its logits are the next token's)."""
        if not self.enabled:
            return free.pop(0), 0
        best, reused = min(free, key=lambda slot: self._held[slot].used), 0
        for slot in free:
            held = self._held[slot]
            if held.scope != scope:
                continue
            shared = min(common_prefix(held.tokens, context), len(context) - 1)
            if shared > reused:
                best, reused = slot, shared
        free.remove(best)
        held = self._held[best]
        # From here the slot is being rewritten past the shared prefix.
        held.scope, held.tokens, held.used = scope, context[:reused], next(self._clock)
        if reused:
            self.hits += 1
            self.reused_tokens += reused
        return best, reused

    def leave(self, slot: int, scope: Scope, tokens: list[int]) -> None:
        """A sequence in ``scope`` left ``slot`` holding the cache of ``tokens``."""
        if self.enabled:
            self._held[slot] = Held(scope, tokens, next(self._clock))
