"""A failure that belongs to one sequence ends that sequence alone, with ERROR: its
constraint raising mid-generation, its adapter's rows failing a batched decode, its prefill
failing, its row of logits not finite. The sequences beside it finish with exactly the
tokens they produce alone, greedy and seeded."""

from __future__ import annotations

import torch
from generation_fakes import VOCAB, CountingModel

from ferryman_server.gpu_node.generation.engine import Constraint, GenerationEngine
from ferryman_server.gpu_node.generation.sampler import GREEDY, Sampling
from ferryman_server.gpu_node.generation.scheduler import (
    FinishReason,
    Scheduler,
    Sequence,
    TokenEvent,
    VirtualTokenCounter,
)

MAX_LEN = 256
BAD_ADAPTER = 7
HEALTHY = (
    ("greedy", [3], GREEDY),
    ("seeded", [11], Sampling(temperature=1.0, seed=5)),
    ("top-k", [20], Sampling(temperature=2.0, top_k=3, seed=9)),
)


class RaisingConstraint:
    """Allows every token until its ``after``-th step, then raises."""

    def __init__(self, after: int) -> None:
        self.after, self.calls = after, 0

    def allowed(self, vocab: int) -> torch.Tensor:
        self.calls += 1
        if self.calls > self.after:
            raise RuntimeError("grammar state corrupted")
        return torch.ones(vocab, dtype=torch.bool)

    def consume(self, token: int) -> None:
        pass

    @property
    def finished(self) -> FinishReason | None:
        return None


class FaultyModel(CountingModel):
    """CountingModel whose decode fails whenever a row of ``BAD_ADAPTER`` is in the batch,
    whose prefill fails for prompts starting with 99, and whose logits are NaN after token 40
    at position 3."""

    def prefill(self, slot: int, tokens: list[int], start: int, adapter: int = 0) -> torch.Tensor:
        if start == 0 and tokens[0] == 99:
            raise RuntimeError("prefill exploded")
        return super().prefill(slot, tokens, start, adapter)

    def decode(
        self, slots: list[int], tokens: list[int], positions: list[int], adapters: list[int] | None = None
    ) -> torch.Tensor:
        if BAD_ADAPTER in (adapters or []):
            raise RuntimeError("adapter factors missing")
        logits = super().decode(slots, tokens, positions, adapters)
        for row, (token, position) in enumerate(zip(tokens, positions, strict=True)):
            if (token, position) == (40, 3):
                logits[row] = float("nan")
        return logits


def engine() -> GenerationEngine:
    return GenerationEngine(FaultyModel(), Scheduler(8, 64, VirtualTokenCounter()), MAX_LEN, stop_tokens=())


def run(e: GenerationEngine) -> list[TokenEvent]:
    events: list[TokenEvent] = []
    while not e.idle:
        events += e.step()
    return events


def outputs(events: list[TokenEvent]) -> dict[str, tuple[list[int], FinishReason | None]]:
    found: dict[str, tuple[list[int], FinishReason | None]] = {}
    for event in events:
        tokens, _ = found.get(event.seq_id, ([], None))
        if event.token is not None:
            tokens.append(event.token)
        found[event.seq_id] = (tokens, event.finish)
    return found


def solo(seq_id: str, prompt: list[int], sampling: Sampling) -> tuple[list[int], FinishReason | None]:
    e = engine()
    e.submit(Sequence(seq_id, "t", prompt, max_tokens=12), sampling)
    return outputs(run(e))[seq_id]


def healthy_beside(
    seq: Sequence, constraint: Constraint | None = None
) -> dict[str, tuple[list[int], FinishReason | None]]:
    e = engine()
    for seq_id, prompt, sampling in HEALTHY:
        e.submit(Sequence(seq_id, "t", prompt, max_tokens=12), sampling)
    e.submit(seq, constraint=constraint)
    return outputs(run(e))


def assert_healthy_as_alone(found: dict[str, tuple[list[int], FinishReason | None]]) -> None:
    for seq_id, prompt, sampling in HEALTHY:
        assert found[seq_id] == solo(seq_id, prompt, sampling), seq_id
        assert found[seq_id][1] == FinishReason.LENGTH


def test_a_constraint_that_raises_mid_generation_ends_its_sequence_alone() -> None:
    found = healthy_beside(Sequence("bad", "t", [30], max_tokens=12), RaisingConstraint(after=3))
    assert found["bad"] == ([31, 32, 33], FinishReason.ERROR)
    assert_healthy_as_alone(found)


def test_a_batched_decode_that_fails_for_one_adapter_ends_that_sequence_alone() -> None:
    found = healthy_beside(Sequence("bad", "t", [30], max_tokens=12, adapter=BAD_ADAPTER))
    # Its prefill ran (the first token), its first decode failed, alone too.
    assert found["bad"] == ([31], FinishReason.ERROR)
    assert_healthy_as_alone(found)


def test_a_prefill_that_fails_ends_its_sequence_alone() -> None:
    found = healthy_beside(Sequence("bad", "t", [99, 1], max_tokens=12))
    assert found["bad"] == ([], FinishReason.ERROR)
    assert_healthy_as_alone(found)


def test_a_row_of_logits_that_is_not_finite_ends_its_sequence_alone() -> None:
    found = healthy_beside(Sequence("bad", "t", [37], max_tokens=12))
    assert found["bad"] == ([38, 39, 40], FinishReason.ERROR)  # the NaN came for its next token
    assert_healthy_as_alone(found)


def test_the_counting_model_stays_within_its_vocabulary() -> None:
    assert solo("s", [VOCAB - 2], GREEDY) == ([VOCAB - 1, *range(11)], FinishReason.LENGTH)
