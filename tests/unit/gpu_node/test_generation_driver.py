"""The engine on its worker thread: streams per sequence, a caller that leaves frees its
slot at the next step, a quota stop ends a stream mid-way, close ends everything."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import torch

from ferryman_server.gpu_node.generation.driver import GenerationDriver
from ferryman_server.gpu_node.generation.engine import GenerationEngine
from ferryman_server.gpu_node.generation.scheduler import (
    FinishReason,
    Scheduler,
    Sequence,
    TokenEvent,
    VirtualTokenCounter,
)

VOCAB = 50
STEP_S = 0.005
MAX_LEN = 256
WAIT_S = 10.0


class SlowCountingModel:
    """Next token = last + 1, each forward taking STEP_S (a stream stays live a while)."""

    def _logits(self, token: int) -> torch.Tensor:
        logits = torch.zeros(VOCAB)
        logits[(token + 1) % VOCAB] = 1.0
        return logits

    def prefill(self, slot: int, tokens: list[int], start: int, adapter: int = 0) -> torch.Tensor:
        time.sleep(STEP_S)
        return self._logits(tokens[-1])

    def decode(
        self, slots: list[int], tokens: list[int], positions: list[int], adapters: list[int] | None = None
    ) -> torch.Tensor:
        time.sleep(STEP_S)
        return torch.stack([self._logits(t) for t in tokens])


def driver(slots: int) -> GenerationDriver:
    engine = GenerationEngine(
        SlowCountingModel(), Scheduler(slots, 32, VirtualTokenCounter()), MAX_LEN, stop_tokens=()
    )
    return GenerationDriver(engine, asyncio.get_running_loop())


async def collect(gen: GenerationDriver, seq: Sequence, keep: int | None = None) -> list[TokenEvent]:
    events = []
    async for event in gen.generate(seq):
        events.append(event)
        if keep is not None and len(events) == keep:
            break
    return events


async def test_sequences_stream_concurrently() -> None:
    gen = driver(slots=4)
    runs = await asyncio.wait_for(
        asyncio.gather(*(collect(gen, Sequence(f"s{i}", "t", [i * 10], max_tokens=5)) for i in range(3))),
        WAIT_S,
    )
    for i, events in enumerate(runs):
        assert [e.token for e in events] == [i * 10 + k for k in range(1, 6)]
        assert events[-1].finish == FinishReason.LENGTH
    await gen.close()


async def test_a_caller_that_leaves_frees_its_slot_for_the_next() -> None:
    gen = driver(slots=1)
    hog = Sequence("hog", "t", [1], max_tokens=200)
    assert len(await asyncio.wait_for(collect(gen, hog, keep=2), WAIT_S)) == 2
    # One slot: the next sequence runs only because the hog's slot was freed.
    after = await asyncio.wait_for(collect(gen, Sequence("next", "t", [5], max_tokens=3)), WAIT_S)
    assert [e.token for e in after] == [6, 7, 8]
    assert hog.finish == FinishReason.CANCELLED and len(hog.generated) < 10
    await gen.close()


async def test_a_quota_stop_ends_the_stream_mid_way() -> None:
    gen = driver(slots=2)
    events: list[TokenEvent] = []
    async for event in gen.generate(Sequence("q", "t", [1], max_tokens=200)):
        events.append(event)
        if len(events) == 3:
            gen.finish("q", FinishReason.QUOTA)
    assert events[-1] == TokenEvent("q", None, FinishReason.QUOTA)
    assert 3 <= len(events) - 1 <= 5, "ended within a step or two of the stop"
    await gen.close()


async def test_what_cannot_run_is_refused_before_it_queues_and_close_ends_the_rest() -> None:
    gen = driver(slots=2)
    with pytest.raises(ValueError, match="exceed the context"):
        await collect(gen, Sequence("big", "t", [1] * MAX_LEN, max_tokens=5))
    stream = gen.generate(Sequence("long", "t", [1], max_tokens=200))
    first = await asyncio.wait_for(anext(stream), WAIT_S)
    assert first.token == 2
    await gen.close()
    rest = [e async for e in stream]
    assert rest[-1].finish == FinishReason.CANCELLED


async def test_unloading_an_adapter_ends_only_its_generations_and_then_frees_it() -> None:
    """Its generations end CANCELLED between two steps, the others run on, its factors are
    freed only then, and a generation that arrives for it later is refused, alone: a step
    never meets an adapter that is gone (it would fail every running sequence)."""
    gen = driver(slots=4)
    freed = threading.Event()
    other = asyncio.create_task(collect(gen, Sequence("b", "u", [1], max_tokens=40)))
    events: list[TokenEvent] = []
    async for event in gen.generate(Sequence("a", "t", [1], max_tokens=250, adapter=1)):
        events.append(event)
        if len(events) == 1:
            gen.retire_adapter(1, freed.set)
    assert events[-1] == TokenEvent("a", None, FinishReason.CANCELLED)
    kept = await asyncio.wait_for(other, WAIT_S)
    assert kept[-1].finish == FinishReason.LENGTH and sum(e.token is not None for e in kept) == 40
    assert freed.is_set()
    late = await asyncio.wait_for(collect(gen, Sequence("c", "t", [1], max_tokens=3, adapter=1)), WAIT_S)
    assert [e.finish for e in late] == [FinishReason.ERROR]
    await gen.close()
