"""The engine under a constraint (a fake grammar): each token is drawn from what it allows,
greedy or sampled, beside an unconstrained sequence in the same batch; the sequence ends
once the constraint is complete (STOP) or failed (ERROR)."""

from __future__ import annotations

import torch
from generation_fakes import CountingModel

from ferryman_server.gpu_node.generation.engine import GenerationEngine
from ferryman_server.gpu_node.generation.sampler import Sampling
from ferryman_server.gpu_node.generation.scheduler import (
    FinishReason,
    Scheduler,
    Sequence,
    TokenEvent,
    VirtualTokenCounter,
)

MAX_LEN = 256


class EvenTokens:
    """Allows only even tokens; complete after ``length`` of them (or failed, with ``fail``)."""

    def __init__(self, length: int, fail: bool = False) -> None:
        self.length, self.fail = length, fail
        self.consumed: list[int] = []

    def allowed(self, vocab: int) -> torch.Tensor:
        return torch.arange(vocab) % 2 == 0

    def consume(self, token: int) -> None:
        self.consumed.append(token)

    @property
    def finished(self) -> FinishReason | None:
        if len(self.consumed) < self.length:
            return None
        return FinishReason.ERROR if self.fail else FinishReason.STOP


def run(engine: GenerationEngine) -> list[TokenEvent]:
    events = []
    while not engine.idle:
        events += engine.step()
    return events


def engine() -> GenerationEngine:
    return GenerationEngine(CountingModel(), Scheduler(4, 32, VirtualTokenCounter()), MAX_LEN, stop_tokens=())


def test_a_constrained_sequence_draws_only_allowed_tokens_beside_a_free_one() -> None:
    e = engine()
    greedy, sampled = EvenTokens(length=5), EvenTokens(length=5)
    e.submit(Sequence("greedy", "t", [3], max_tokens=20), constraint=greedy)
    e.submit(Sequence("sampled", "t", [3], max_tokens=20), Sampling(temperature=1.0, seed=1), sampled)
    e.submit(Sequence("free", "t", [3], max_tokens=5))
    events = run(e)
    tokens = {
        sid: [ev.token for ev in events if ev.seq_id == sid and ev.token is not None]
        for sid in ("greedy", "sampled", "free")
    }
    assert tokens["free"] == [4, 5, 6, 7, 8]  # the constraint of its neighbours does not touch it
    for sid, constraint in (("greedy", greedy), ("sampled", sampled)):
        assert len(tokens[sid]) == 5 and all(t % 2 == 0 for t in tokens[sid])
        assert constraint.consumed == tokens[sid]  # fed every token drawn, in order
    finishes = {ev.seq_id: ev.finish for ev in events if ev.finish is not None}
    assert finishes == {
        "greedy": FinishReason.STOP,
        "sampled": FinishReason.STOP,
        "free": FinishReason.LENGTH,
    }


def test_a_failed_constraint_ends_its_sequence_as_an_error() -> None:
    e = engine()
    e.submit(Sequence("s", "t", [1], max_tokens=20), constraint=EvenTokens(length=2, fail=True))
    events = run(e)
    assert [ev.finish for ev in events if ev.finish is not None] == [FinishReason.ERROR]
    assert sum(1 for ev in events if ev.token is not None) == 2
