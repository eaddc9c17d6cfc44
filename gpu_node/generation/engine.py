"""The generation engine of a node: sequences join and leave the running batch at every
step. A step reads plan, model, sample, update: the scheduler's plan (prompt chunks, then
one batched decode of every running sequence), the model's forwards, the batched sampler
over every row that draws a token (each masked by its constraint), and the scheduler's
update, which charges each token and decides which sequences finished and why.

A failure that belongs to one sequence (its prefill, its constraint, its LoRA adapter's
rows, a non-finite row of logits) ends that sequence alone, with ERROR; a batched decode
that fails is run again one sequence at a time, so only the sequences that fail alone end.
Every tensor the engine makes is made on the model's device; the host reads back one id
and one flag per row each step."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping
from typing import Protocol

import torch

from ferryman_server.gpu_node.generation.sampler import GREEDY, Sampler, Sampling
from ferryman_server.gpu_node.generation.scheduler import (
    FinishReason,
    Scheduler,
    SeqState,
    Sequence,
    StepOutput,
    TokenEvent,
)

log = logging.getLogger("ferryman.node.generation")

MAX_REASON_CHARS = 300
"""Of a failure's text kept in a sequence's reason (and the log)."""


class SlotModel(Protocol):
    """A causal LM over a slot cache (``ferryman_server.gpu_node.generation.llama.SlotLlama``,
    or a fake)."""

    def prefill(self, slot: int, tokens: list[int], start: int, adapter: int = 0) -> torch.Tensor: ...

    def decode(
        self, slots: list[int], tokens: list[int], positions: list[int], adapters: list[int] | None = None
    ) -> torch.Tensor: ...


class Constraint(Protocol):
    """What a sequence's output may be (``ferryman_server.gpu_node.generation.structured.
    JsonConstraint``, or a fake): host-side, it says each step which tokens may come next
    and is fed each token drawn."""

    def allowed(self, vocab: int) -> torch.Tensor:
        """A bool mask [vocab] on the host: True where the token may come next."""
        ...

    def consume(self, token: int) -> None: ...

    @property
    def finished(self) -> FinishReason | None:
        """STOP once the output is complete, ERROR if the constraint failed, else None."""
        ...


def failure(what: str, exc: BaseException) -> str:
    return f"{what}: {type(exc).__name__}: {exc}"[:MAX_REASON_CHARS]


class GenerationEngine:
    """Not thread-safe: one owner calls ``submit``, ``cancel`` and ``step``."""

    def __init__(
        self,
        model: SlotModel,
        scheduler: Scheduler,
        max_len: int,
        stop_tokens: Collection[int],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._model = model
        self.scheduler = scheduler
        self._max_len = max_len
        self._stop_tokens = frozenset(stop_tokens)
        self._clock = clock
        self._sequences: dict[str, Sequence] = {}
        self._sampler = Sampler()
        self._constraints: dict[str, Constraint] = {}
        self._retired: set[int] = set()
        """LoRA adapters unloaded (ids are never reused): a sequence under one is refused."""
        self.prefill_forwards = 0
        self.decode_forwards = 0
        """Decode forwards run, each for every running sequence: what batching saves."""

    def check(self, seq: Sequence) -> None:
        """Refuse (ValueError) what cannot run: no prompt, or one that cannot fit its slot.
        Pure: callable from any thread before handing ``seq`` to the engine's owner."""
        if not seq.prompt or seq.max_tokens < 1:
            raise ValueError("a generation needs a prompt and max_tokens >= 1")
        if len(seq.prompt) + seq.max_tokens - 1 > self._max_len:
            raise ValueError(
                f"{len(seq.prompt)} prompt tokens + max_tokens {seq.max_tokens} exceed the "
                f"context of {self._max_len}"
            )

    def submit(
        self, seq: Sequence, sampling: Sampling = GREEDY, constraint: Constraint | None = None
    ) -> None:
        """Queue ``seq`` (``check`` first); with ``constraint``, each of its tokens is drawn
        from those it allows, and it stops once the constraint is finished."""
        if seq.id in self._sequences:
            raise ValueError(f"sequence {seq.id!r} is already running")
        if seq.adapter in self._retired:
            raise ValueError(f"adapter {seq.adapter} was unloaded")
        self.check(seq)
        seq.stop_tokens = self._stop_tokens
        self._sequences[seq.id] = seq
        self._sampler.add(seq.id, sampling)
        if constraint is not None:
            self._constraints[seq.id] = constraint
        self.scheduler.add(seq, self._clock())

    def finish(self, seq_id: str, reason: FinishReason) -> bool:
        """End a sequence now (cancelled, out of quota): its slot serves the next step."""
        seq = self._sequences.get(seq_id)
        if seq is None:
            return False
        self._forget(seq_id)
        self.scheduler.finish(seq, reason)
        return True

    def _forget(self, seq_id: str) -> None:
        self._sequences.pop(seq_id, None)
        self._sampler.remove(seq_id)
        self._constraints.pop(seq_id, None)

    def retire_adapter(self, adapter: int) -> list[str]:
        """End (CANCELLED) every sequence under LoRA ``adapter`` and refuse new ones: its
        factors are about to go. The ids of the sequences ended."""
        self._retired.add(adapter)
        ended = [seq.id for seq in self._sequences.values() if seq.adapter == adapter]
        for seq_id in ended:
            self.finish(seq_id, FinishReason.CANCELLED)
        return ended

    @property
    def context(self) -> int:
        """Positions a sequence may use: its prompt plus all but its last generated token."""
        return self._max_len

    @property
    def idle(self) -> bool:
        return not self._sequences

    def live(self) -> list[str]:
        """Ids of the sequences not yet finished, waiting or running."""
        return list(self._sequences)

    def step(self) -> list[TokenEvent]:
        """One iteration of the running batch: plan, model, sample, update."""
        plan = self.scheduler.plan(self._clock())
        ended: dict[str, tuple[FinishReason, str]] = {}
        drawing: list[tuple[Sequence, torch.Tensor]] = []
        for seq, start, end in plan.prefill:
            logits = self._prefill(seq, start, end, ended)
            if logits is not None and end == len(seq.context) and not seq.generated:
                # Its prompt is in: it draws its first token (a sequence resumed after a
                # preemption feeds its last token at its next decode instead).
                drawing.append((seq, logits))
        decode = [s for s in plan.decode if s.state == SeqState.DECODING]
        drawing += self._decode(decode, ended)
        tokens = self._sample(drawing, ended)
        events = self.scheduler.update(plan, StepOutput(tokens, ended))
        for event in events:
            if event.finish is not None:
                if event.finish == FinishReason.ERROR and event.reason:
                    log.warning("generation %s ended: %s", event.seq_id, event.reason)
                self._forget(event.seq_id)
        return events

    def _prefill(
        self, seq: Sequence, start: int, end: int, ended: dict[str, tuple[FinishReason, str]]
    ) -> torch.Tensor | None:
        """One prompt chunk of ``seq``; its logits after the chunk, None if it failed (then
        ``seq`` alone ends)."""
        assert seq.slot is not None
        try:
            logits = self._model.prefill(seq.slot, seq.context[start:end], start, seq.adapter)
        except Exception as exc:
            ended[seq.id] = (FinishReason.ERROR, failure("prefill failed", exc))
            return None
        self.prefill_forwards += 1
        return logits

    def _decode(
        self, decode: list[Sequence], ended: dict[str, tuple[FinishReason, str]]
    ) -> list[tuple[Sequence, torch.Tensor]]:
        """One decode of every sequence in ``decode`` (each one's next token's logits). A
        batched forward that fails is run again for each sequence alone: a decode writes
        each sequence's newest key and value at its own position, so running it again is
        harmless, and only the sequences that fail alone end."""
        if not decode:
            return []
        try:
            logits = self._forward(decode)
        except Exception as exc:
            if len(decode) == 1:
                ended[decode[0].id] = (FinishReason.ERROR, failure("decode failed", exc))
                return []
            log.warning("a batched decode of %d sequences failed (%s): each runs alone", len(decode), exc)
            alone: list[tuple[Sequence, torch.Tensor]] = []
            for seq in decode:
                alone += self._decode([seq], ended)
            return alone
        return list(zip(decode, logits, strict=True))

    def _forward(self, decode: list[Sequence]) -> torch.Tensor:
        slots = []
        for seq in decode:
            assert seq.slot is not None
            slots.append(seq.slot)
        logits = self._model.decode(
            slots,
            [s.generated[-1] for s in decode],
            [s.last_position for s in decode],
            [s.adapter for s in decode],
        )
        self.decode_forwards += 1
        return logits

    def _sample(
        self, drawing: list[tuple[Sequence, torch.Tensor]], ended: dict[str, tuple[FinishReason, str]]
    ) -> Mapping[str, int]:
        """The token each of ``drawing`` draws, all rows in one batched draw; a sequence whose
        constraint fails, or whose row is not finite, ends instead."""
        rows: list[tuple[Sequence, torch.Tensor]] = []
        allowed: dict[int, torch.Tensor] = {}
        for seq, logits in drawing:
            constraint = self._constraints.get(seq.id)
            if constraint is not None:
                try:
                    mask = constraint.allowed(logits.shape[-1])
                except Exception as exc:
                    ended[seq.id] = (FinishReason.ERROR, failure("constraint failed", exc))
                    continue
                if not bool(mask.any()):
                    ended[seq.id] = (FinishReason.ERROR, "constraint failed: it allows no token")
                    continue
                allowed[len(rows)] = mask
            rows.append((seq, logits))
        if not rows:
            return {}
        drawn = self._sampler.draw(
            torch.stack([logits for _, logits in rows]), [s.id for s, _ in rows], allowed
        )
        tokens: dict[str, int] = {}
        for (seq, _), token, finite in zip(rows, drawn.tokens, drawn.finite, strict=True):
            if not finite:
                ended[seq.id] = (FinishReason.ERROR, "the model's logits were not finite")
                continue
            constraint = self._constraints.get(seq.id)
            if constraint is not None:
                try:
                    constraint.consume(token)
                    finished = constraint.finished
                except Exception as exc:
                    ended[seq.id] = (FinishReason.ERROR, failure("constraint failed", exc))
                    continue
                if finished is not None:
                    ended[seq.id] = (finished, "" if finished == FinishReason.STOP else "constraint failed")
            tokens[seq.id] = token
        return tokens
