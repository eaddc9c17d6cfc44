"""Dead letters: items the model failed on, written to the registry, rate-limited."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Protocol

from ferryman_server.registry.tables import DeadLetter
from ferryman_server.registry.writer import RegistryWriter

log = logging.getLogger("ferryman.batcher.dead_letters")


@dataclass
class TokenBucket:
    """``rate`` tokens per second, bursts up to ``rate``; pure, driven by the caller's clock."""

    rate: float
    tokens: float = 0.0
    last: float | None = None

    def take(self, now: float) -> bool:
        if self.last is None:
            self.tokens = self.rate
        else:
            self.tokens = min(self.rate, self.tokens + (now - self.last) * self.rate)
        self.last = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


class DeadLetters(Protocol):
    """Where the dispatcher records an item that fails alone."""

    def record(self, letter: DeadLetter, now: float) -> bool:
        """Record ``letter`` (False: dropped)."""
        ...


class DeadLetterSink:
    """Writes dead letters to the registry off the event loop; drops (and counts) past
    the rate limit."""

    def __init__(self, writer: RegistryWriter, per_second: float) -> None:
        self._writer = writer
        self._bucket = TokenBucket(rate=per_second)
        self.dropped = 0
        self._tasks: set[asyncio.Task[None]] = set()

    def record(self, letter: DeadLetter, now: float) -> bool:
        if not self._bucket.take(now):
            self.dropped += 1
            return False
        task = asyncio.create_task(self._write(letter))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def _write(self, letter: DeadLetter) -> None:
        try:
            await asyncio.to_thread(self._writer.record_dead_letter, letter)
        except Exception:
            log.exception("could not record dead letter for %s", letter.request_id)

    async def flush(self) -> None:
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
