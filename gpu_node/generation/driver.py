"""The engine on a worker thread, its sequences on the event loop. The thread owns the
engine (nothing else touches it): it applies submissions and cancellations between steps,
steps while any sequence is live and sleeps when none is, and hands each token to the
caller's queue. A caller that stops iterating (its client cancelled, its deadline passed, a
quota ran out) ends its sequence at the next step, and its slot serves the step after."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass

from ferryman_server.gpu_node.generation.engine import Constraint, GenerationEngine
from ferryman_server.gpu_node.generation.sampler import GREEDY, Sampling
from ferryman_server.gpu_node.generation.scheduler import FinishReason, Sequence, TokenEvent

log = logging.getLogger("ferryman.node.generation")

IDLE_WAIT_S = 0.5
"""How long the idle worker sleeps between looks at its stop flag (a submission wakes it)."""
STOP_WAIT_S = 10.0


@dataclass(frozen=True)
class _Submit:
    seq: Sequence
    sampling: Sampling
    constraint: Constraint | None
    events: asyncio.Queue[TokenEvent]


@dataclass(frozen=True)
class _RetireAdapter:
    adapter: int
    then: Callable[[], None]
    """Run on the worker once no sequence runs under the adapter (frees its factors)."""


@dataclass(frozen=True)
class _Finish:
    seq_id: str
    reason: FinishReason


class GenerationDriver:
    """``generate`` yields a sequence's token events until its finish."""

    def __init__(
        self,
        engine: GenerationEngine,
        loop: asyncio.AbstractEventLoop,
        on_step: Callable[[int, int], None] = lambda running, waiting: None,
    ) -> None:
        """``on_step(running, waiting)`` is called on the worker after every step."""
        self._engine = engine
        self._loop = loop
        self._on_step = on_step
        self._inbox: queue.SimpleQueue[_Submit | _Finish | _RetireAdapter | None] = queue.SimpleQueue()
        self._events: dict[str, asyncio.Queue[TokenEvent]] = {}
        self._thread = threading.Thread(target=self._run, name="generation", daemon=True)
        self._thread.start()

    async def generate(
        self, seq: Sequence, sampling: Sampling = GREEDY, constraint: Constraint | None = None
    ) -> AsyncGenerator[TokenEvent, None]:
        """Token events of ``seq``, the last one carrying its finish. Refuses (ValueError)
        before queueing what cannot run."""
        self._engine.check(seq)
        events: asyncio.Queue[TokenEvent] = asyncio.Queue()
        self._inbox.put(_Submit(seq, sampling, constraint, events))
        finished = False
        try:
            while not finished:
                event = await events.get()
                finished = event.finish is not None
                yield event
        finally:
            if not finished:  # the caller left: free the slot at the next step
                self.finish(seq.id, FinishReason.CANCELLED)

    def finish(self, seq_id: str, reason: FinishReason) -> None:
        """End a sequence at the next step (a quota ran out, the client left)."""
        self._inbox.put(_Finish(seq_id, reason))

    def _deliver(self, event: TokenEvent) -> None:
        events = self._events.get(event.seq_id)
        if events is None:
            return
        if event.finish is not None:
            del self._events[event.seq_id]
        self._send(events, event)

    def _send(self, events: asyncio.Queue[TokenEvent], event: TokenEvent) -> None:
        # A loop that closed has no one left to read the event: drop it.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(events.put_nowait, event)

    def retire_adapter(self, adapter: int, then: Callable[[], None]) -> None:
        """End the sequences under LoRA ``adapter`` (CANCELLED), refuse new ones, then call
        ``then``, all between two steps: a step never runs under factors that are gone."""
        self._inbox.put(_RetireAdapter(adapter, then))

    def _apply(self, command: _Submit | _Finish | _RetireAdapter) -> None:
        if isinstance(command, _Submit):
            try:
                self._engine.submit(command.seq, command.sampling, command.constraint)
            except ValueError as exc:
                log.warning("generation %s refused: %s", command.seq.id, exc)
                self._send(command.events, TokenEvent(command.seq.id, None, FinishReason.ERROR))
                return
            self._events[command.seq.id] = command.events
        elif isinstance(command, _RetireAdapter):
            for seq_id in self._engine.retire_adapter(command.adapter):
                self._deliver(TokenEvent(seq_id, None, FinishReason.CANCELLED))
            command.then()
        elif self._engine.finish(command.seq_id, command.reason):
            self._deliver(TokenEvent(command.seq_id, None, command.reason))

    def _drain(self, block: bool) -> bool:
        """Apply the queued commands (waiting a while for one when ``block``); False once
        told to stop."""
        try:
            command = self._inbox.get(timeout=IDLE_WAIT_S) if block else self._inbox.get_nowait()
        except queue.Empty:
            return True
        while command is not None:
            self._apply(command)
            try:
                command = self._inbox.get_nowait()
            except queue.Empty:
                return True
        return False

    def _run(self) -> None:
        while self._drain(block=self._engine.idle):
            if not self._engine.idle:
                self._step()
            self._on_step(len(self._engine.scheduler.running), self._engine.scheduler.waiting)
        self._end(FinishReason.CANCELLED)
        self._on_step(0, 0)

    def _step(self) -> None:
        try:
            events = self._engine.step()
        except Exception:
            log.exception("a generation step failed: ending every running sequence")
            self._end(FinishReason.ERROR)
            return
        for event in events:
            self._deliver(event)

    def _end(self, reason: FinishReason) -> None:
        for seq_id in self._engine.live():
            self._engine.finish(seq_id, reason)
            self._deliver(TokenEvent(seq_id, None, reason))

    async def close(self) -> None:
        """End every sequence (CANCELLED) and stop the worker."""
        self._inbox.put(None)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.to_thread(self._thread.join), STOP_WAIT_S)
