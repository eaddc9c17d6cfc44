"""The generation engine of a node: sequences join and leave the running batch at every
step. One ``step()`` runs the scheduler's plan (prompt chunks, then one batched decode of
every running sequence), samples each sequence's next token with its own settings, and
reports what each sequence produced and which ended, and why."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Protocol

import torch

from ferryman_server.gpu_node.generation.scheduler import FinishReason, Scheduler, SeqState, Sequence


class SlotModel(Protocol):
    """A causal LM over a slot cache (``ferryman_server.gpu_node.generation.llama.SlotLlama``, or a fake)."""

    def prefill(self, slot: int, tokens: list[int], start: int, adapter: int = 0) -> torch.Tensor: ...

    def decode(
        self, slots: list[int], tokens: list[int], positions: list[int], adapters: list[int] | None = None
    ) -> torch.Tensor: ...


class Constraint(Protocol):
    """What a sequence's output may be (``ferryman_server.gpu_node.generation.structured.JsonConstraint``,
    or a fake): the engine masks each step's logits with it and feeds it each token drawn."""

    def mask(self, logits: torch.Tensor) -> torch.Tensor:
        """``logits`` with what may not come next at -inf."""
        ...

    def consume(self, token: int) -> None: ...

    @property
    def finished(self) -> FinishReason | None:
        """STOP once the output is complete, ERROR if the constraint failed, else None."""
        ...


MAX_TEMPERATURE = 100.0
"""Past this, sampling is uniform noise; the router's public bound is tighter."""


@dataclass(frozen=True)
class Sampling:
    """Per-sequence sampling; temperature 0 is greedy (and ignores the rest)."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None

    def __post_init__(self) -> None:
        # Written so that NaN fails too: one NaN temperature would fail the step for every
        # running sequence.
        if not (0 <= self.temperature <= MAX_TEMPERATURE and 0 < self.top_p <= 1 and self.top_k >= 0):
            raise ValueError(f"0 <= temperature <= {MAX_TEMPERATURE:g}, 0 < top_p <= 1 and top_k >= 0")


GREEDY = Sampling()


@dataclass(frozen=True)
class TokenEvent:
    """A token for ``seq_id`` (None when it ended without one), and its finish if it ended."""

    seq_id: str
    token: int | None
    finish: FinishReason | None = None


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
        self._sampling: dict[str, tuple[Sampling, torch.Generator | None]] = {}
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
        generator = None
        if sampling.temperature > 0 and sampling.seed is not None:
            generator = torch.Generator().manual_seed(sampling.seed)
        self._sequences[seq.id] = seq
        self._sampling[seq.id] = (sampling, generator)
        if constraint is not None:
            self._constraints[seq.id] = constraint
        self.scheduler.add(seq, self._clock())

    def finish(self, seq_id: str, reason: FinishReason) -> bool:
        """End a sequence now (cancelled, out of quota): its slot serves the next step."""
        seq = self._sequences.pop(seq_id, None)
        if seq is None:
            return False
        self._sampling.pop(seq_id, None)
        self._constraints.pop(seq_id, None)
        self.scheduler.finish(seq, reason)
        return True

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

    def _sample(self, seq: Sequence, logits: torch.Tensor) -> int:
        constraint = self._constraints.get(seq.id)
        if constraint is None:
            return self._draw(seq, logits)
        token = self._draw(seq, constraint.mask(logits))
        constraint.consume(token)
        return token

    def _draw(self, seq: Sequence, logits: torch.Tensor) -> int:
        sampling, generator = self._sampling[seq.id]
        if sampling.temperature == 0:
            return int(logits.argmax())
        scores = logits.float() / sampling.temperature
        if sampling.top_k:
            kth = torch.topk(scores, min(sampling.top_k, scores.numel())).values[-1]
            scores = scores.masked_fill(scores < kth, float("-inf"))
        if sampling.top_p < 1:
            ordered, index = torch.sort(scores, descending=True)
            cumulative = torch.softmax(ordered, -1).cumsum(-1)
            # Keep the smallest prefix whose mass reaches top_p (the first token always).
            drop = cumulative - torch.softmax(ordered, -1) >= sampling.top_p
            scores = scores.scatter(0, index[drop], float("-inf"))
        return int(torch.multinomial(torch.softmax(scores, -1), 1, generator=generator))

    def _emit(self, seq: Sequence, token: int, events: list[TokenEvent]) -> None:
        seq.generated.append(token)
        self.scheduler.counter.charge(seq.tenant, 1)
        finish = None
        constraint = self._constraints.get(seq.id)
        if token in self._stop_tokens:
            finish = FinishReason.STOP
        elif constraint is not None and constraint.finished is not None:
            finish = constraint.finished
        elif len(seq.generated) >= seq.max_tokens:
            finish = seq.length_reason
        if finish is not None:
            self.finish(seq.id, finish)
        events.append(TokenEvent(seq.id, token, finish))

    def step(self) -> list[TokenEvent]:
        """One iteration of the running batch."""
        plan = self.scheduler.plan(self._clock())
        events = [TokenEvent(s.id, None, FinishReason.DEADLINE) for s in plan.refused]
        for seq in plan.refused:
            self._sequences.pop(seq.id, None)
            self._sampling.pop(seq.id, None)
            self._constraints.pop(seq.id, None)
        for seq, start, end in plan.prefill:
            assert seq.slot is not None
            context = seq.context
            logits = self._model.prefill(seq.slot, context[start:end], start, seq.adapter)
            self.prefill_forwards += 1
            seq.prefilled = end
            if end < len(context):
                continue  # more chunks in later steps
            seq.move(SeqState.DECODING)
            if seq.generated:
                continue  # resumed after a preemption: its next decode feeds its last token
            self._emit(seq, self._sample(seq, logits), events)
        decode = [s for s in plan.decode if s.state == SeqState.DECODING]
        if decode:
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
            for seq, row in zip(decode, logits, strict=True):
                self._emit(seq, self._sample(seq, row), events)
        return events
