"""Continuous batching decided per step, with a fake model: decodes for every running
sequence in one forward, prompts in chunks under the step budget, slots freed the step a
sequence ends, and free slots given in Virtual Token Counter order."""

from __future__ import annotations

import pytest
from generation_fakes import VOCAB, CountingModel

from ferryman_server.gpu_node.generation.engine import GenerationEngine
from ferryman_server.gpu_node.generation.sampler import Sampling
from ferryman_server.gpu_node.generation.scheduler import (
    Admission,
    FinishReason,
    Scheduler,
    SeqState,
    Sequence,
    VirtualTokenCounter,
)

STOP = 0
MAX_LEN = 64


def engine(slots: int = 4, step_tokens: int = 32) -> tuple[GenerationEngine, CountingModel]:
    model = CountingModel()
    scheduler = Scheduler(slots, step_tokens, VirtualTokenCounter())
    return GenerationEngine(model, scheduler, MAX_LEN, {STOP}, clock=lambda: 0.0), model


def run(gen: GenerationEngine, steps: int = 200) -> dict[str, tuple[list[int], FinishReason | None]]:
    out: dict[str, tuple[list[int], FinishReason | None]] = {}
    for _ in range(steps):
        for event in gen.step():
            tokens, _ = out.get(event.seq_id, ([], None))
            out[event.seq_id] = ([*tokens, *([event.token] if event.token is not None else [])], event.finish)
        if gen.idle:
            break
    return out


def test_running_sequences_decode_together_and_end_by_length_or_stop() -> None:
    gen, model = engine()
    gen.submit(Sequence("a", "t", [5], max_tokens=3))
    gen.submit(Sequence("b", "t", [10, 11], max_tokens=6))
    gen.submit(Sequence("c", "t", [47], max_tokens=10))  # 48, 49, then 0: the stop token
    out = run(gen)
    assert out["a"] == ([6, 7, 8], FinishReason.LENGTH)
    assert out["b"] == ([12, 13, 14, 15, 16, 17], FinishReason.LENGTH)
    assert out["c"] == ([48, 49, STOP], FinishReason.STOP)
    assert model.decode_batches[:2] == [3, 3], "one forward decodes every running sequence"


def test_a_long_prompt_is_prefilled_in_chunks_beside_running_decodes() -> None:
    gen, model = engine(slots=2, step_tokens=10)
    gen.submit(Sequence("short", "t", [1], max_tokens=20))
    gen.step()  # short prefilled, first token out
    gen.submit(Sequence("long", "t", list(range(1, 26)), max_tokens=2))
    decoded_before = len(model.decode_batches)
    for _ in range(3):
        gen.step()
    # Each step: one decode for "short" (1 token of budget), 9 prompt tokens for "long".
    assert [(s, n) for _, s, n in model.prefills[1:]] == [(0, 9), (9, 9), (18, 7)]
    assert len(model.decode_batches) - decoded_before == 3, "short never waited for the long prompt"


def test_a_finished_sequence_frees_its_slot_for_the_next_step() -> None:
    gen, _ = engine(slots=1)
    gen.submit(Sequence("first", "t", [1], max_tokens=50))
    gen.submit(Sequence("second", "t", [2], max_tokens=1))
    gen.step()
    assert gen.scheduler.waiting == 1, "one slot: the second waits"
    assert gen.finish("first", FinishReason.CANCELLED)
    events = gen.step()
    assert [(e.seq_id, e.token, e.finish) for e in events] == [("second", 3, FinishReason.LENGTH)]
    assert not gen.finish("first", FinishReason.CANCELLED), "ended once"


def test_free_slots_go_to_the_tenant_with_the_least_service() -> None:
    scheduler = Scheduler(1, 64, VirtualTokenCounter())
    heavy = [Sequence(f"h{i}", "heavy", [1] * 10, max_tokens=4) for i in range(5)]
    for seq in heavy:
        scheduler.add(seq)
    (first,) = [s for s, _, _ in scheduler.plan(0.0).prefill]
    assert first is heavy[0]
    light = Sequence("l", "light", [1] * 10, max_tokens=4)
    scheduler.add(light)  # lifted to heavy's counter (10): no credit for having been idle
    assert scheduler.counter.counters["light"] == scheduler.counter.counters["heavy"] == 10
    scheduler.counter.charge("heavy", 4)  # the tokens its first sequence generated
    scheduler.finish(first, FinishReason.LENGTH)
    (admitted,) = [s for s, _, _ in scheduler.plan(0.0).prefill]
    assert admitted is light, "heavy's four queued sequences do not go first"


ACTIVE_S = 5.0


def admitted(scheduler: Scheduler, now: float) -> list[str]:
    """Ids of the sequences a step admits (its prompts prefilled whole, as the engine does)."""
    plan = scheduler.plan(now)
    for seq, _, end in plan.prefill:
        seq.prefilled = end
        if end == len(seq.prompt):
            seq.move(SeqState.DECODING)
    return [seq.id for seq, start, _ in plan.prefill if start == 0]


def test_vtc_keeps_a_slot_for_an_active_tenant_that_holds_none() -> None:
    """Slots are not preempted: a heavy tenant filling them all would make a light tenant's
    next request wait for one of its generations to end. Under VTC one stays free for it."""
    scheduler = Scheduler(4, 256, VirtualTokenCounter(), Admission.VTC, ACTIVE_S)
    light = Sequence("l0", "light", [1] * 4, max_tokens=2)
    scheduler.add(light, 0.0)
    assert admitted(scheduler, 0.0) == ["l0"]
    scheduler.finish(light, FinishReason.LENGTH)
    for i in range(8):
        scheduler.add(Sequence(f"h{i}", "heavy", [1] * 4, max_tokens=50), 1.0)
    assert admitted(scheduler, 1.0) == ["h0", "h1", "h2"], "one slot kept for light"
    scheduler.add(Sequence("l1", "light", [1] * 4, max_tokens=2), 2.0)
    assert admitted(scheduler, 2.0) == ["l1"], "light starts at once"
    # Once light has been quiet for longer than the window, heavy may use every slot.
    later = 2.0 + ACTIVE_S + 1
    scheduler.finish(next(s for s in scheduler.running if s.id == "l1"), FinishReason.LENGTH)
    assert admitted(scheduler, later) == ["h3"]


def test_a_tenant_below_its_share_goes_first_whatever_its_counter() -> None:
    """VTC alone would give a freed slot to heavy once light's counter passed heavy's (light
    is charged its prompt on admission): light, holding one of four slots, is below its
    share (two) and goes first; holding two, it waits its turn."""
    scheduler = Scheduler(4, 256, VirtualTokenCounter(), Admission.VTC, ACTIVE_S)
    scheduler.add(Sequence("l0", "light", [1] * 4, max_tokens=50), 0.0)
    assert admitted(scheduler, 0.0) == ["l0"]
    for i in range(6):
        scheduler.add(Sequence(f"h{i}", "heavy", [1] * 4, max_tokens=50), 0.5)
    assert admitted(scheduler, 0.5) == ["h0", "h1"], "the fourth slot is kept for light"
    scheduler.add(Sequence("l1", "light", [1] * 200, max_tokens=2), 1.0)
    assert admitted(scheduler, 1.0) == ["l1"], "light takes the kept slot"
    assert scheduler.counter.counters["light"] > scheduler.counter.counters["heavy"]
    scheduler.finish(next(s for s in scheduler.running if s.id == "l1"), FinishReason.LENGTH)
    scheduler.add(Sequence("l2", "light", [1] * 4, max_tokens=2), 1.5)
    assert admitted(scheduler, 1.5) == ["l2"], "below its share, light goes before heavy"
    scheduler.finish(next(s for s in scheduler.running if s.id == "h1"), FinishReason.LENGTH)
    scheduler.add(Sequence("l3", "light", [1] * 4, max_tokens=2), 2.0)
    assert admitted(scheduler, 2.0) == ["h2"], "at its share, light waits: heavy's turn"


def test_a_tenant_that_filled_the_slots_alone_is_preempted_for_a_newcomer() -> None:
    """Heavy took all four slots while alone; light's request takes the slot of heavy's
    newest generation at the next step, and that generation resumes later with the same
    tokens as if it had never stopped (its cache recomputed from prompt and tokens)."""
    clock = [0.0]
    model = CountingModel()
    scheduler = Scheduler(4, 64, VirtualTokenCounter(), Admission.VTC, ACTIVE_S)
    gen = GenerationEngine(model, scheduler, MAX_LEN, {STOP}, clock=lambda: clock[0])
    for i in range(4):
        gen.submit(Sequence(f"h{i}", "heavy", [10 + i, 11 + i], max_tokens=20))
    out: dict[str, list[int]] = {}
    for step in range(40):
        if step == 5:
            gen.submit(Sequence("light", "light", [1, 2, 3], max_tokens=3))
        for event in gen.step():
            if event.token is not None:
                out.setdefault(event.seq_id, []).append(event.token)
        clock[0] += 0.1
        if step == 5:
            assert "light" in out, "light's first token came the step it arrived"
            assert scheduler.preemptions == 1
    assert out["light"] == [4, 5, 6]
    for i in range(4):
        # Next token = last + 1 (mod VOCAB): 20 tokens after the prompt, none lost or repeated.
        assert out[f"h{i}"] == [(11 + i + k) % VOCAB for k in range(1, 21)], f"h{i}"
    assert scheduler.counter.counters["heavy"] == 4 * 2 + 4 * 20, "a resumed prompt is not charged twice"


def test_slots_are_shared_by_tenant_weight() -> None:
    """Gold weighs 3 and free 1 (registry weights, carried by each request): with both
    backlogged, gold holds three of the four slots and free one."""
    scheduler = Scheduler(4, 256, VirtualTokenCounter(), Admission.VTC, ACTIVE_S)
    for i in range(6):
        scheduler.add(Sequence(f"g{i}", "gold", [1] * 4, max_tokens=50, weight=3.0), 0.0)
        scheduler.add(Sequence(f"f{i}", "free", [1] * 4, max_tokens=50), 0.0)
    admitted(scheduler, 0.0)
    held = {t: sum(1 for s in scheduler.running if s.tenant == t) for t in ("gold", "free")}
    assert held == {"gold": 3, "free": 1}


def test_more_tenants_than_slots_never_preempt_each_other() -> None:
    """Six tenants, four slots: each share is below one slot, yet one slot each is never
    "above share" (else every step would preempt one for another and recompute it)."""
    scheduler = Scheduler(4, 256, VirtualTokenCounter(), Admission.VTC, ACTIVE_S)
    for i in range(6):
        scheduler.add(Sequence(f"s{i}", f"t{i}", [1] * 4, max_tokens=50), 0.0)
    for step in range(10):
        admitted(scheduler, step * 0.1)
    assert scheduler.preemptions == 0 and len(scheduler.running) == 4


def test_fcfs_lets_a_heavy_tenant_take_every_slot() -> None:
    scheduler = Scheduler(4, 256, VirtualTokenCounter(), Admission.FCFS, ACTIVE_S)
    light = Sequence("l0", "light", [1] * 4, max_tokens=2)
    scheduler.add(light, 0.0)
    scheduler.plan(0.0)
    scheduler.finish(light, FinishReason.LENGTH)
    for i in range(8):
        scheduler.add(Sequence(f"h{i}", "heavy", [1] * 4, max_tokens=50), 1.0)
    assert admitted(scheduler, 1.0) == ["h0", "h1", "h2", "h3"]
    scheduler.add(Sequence("l1", "light", [1] * 4, max_tokens=2), 2.0)
    assert admitted(scheduler, 2.0) == [], "light waits behind heavy's running generations"
    scheduler.finish(scheduler.running[0], FinishReason.LENGTH)
    assert admitted(scheduler, 3.0) == ["h4"], "and behind its queued ones: they came first"


def test_a_tenant_alone_uses_every_slot() -> None:
    scheduler = Scheduler(4, 256, VirtualTokenCounter(), Admission.VTC, ACTIVE_S)
    for i in range(6):
        scheduler.add(Sequence(f"h{i}", "heavy", [1] * 4, max_tokens=50), 0.0)
    assert admitted(scheduler, 0.0) == ["h0", "h1", "h2", "h3"]


def test_weights_scale_the_service_counted() -> None:
    counter = VirtualTokenCounter({"gold": 2.0})
    counter.charge("gold", 100)
    counter.charge("free", 100)
    assert counter.counters == {"gold": 50.0, "free": 100.0}
    assert counter.least(["gold", "free"]) == "gold"


def test_a_sequence_that_cannot_start_in_time_is_refused_without_a_slot() -> None:
    scheduler = Scheduler(1, 16, VirtualTokenCounter())
    running = Sequence("r", "t", [1], max_tokens=9)
    late = Sequence("late", "t", [1], max_tokens=9, start_by=5.0)
    scheduler.add(running)
    scheduler.add(late)
    scheduler.plan(0.0)
    assert scheduler.plan(4.0).refused == [], "still in time"
    # Refused while the only slot is still taken: it does not wait for one to free.
    plan = scheduler.plan(6.0)
    assert plan.refused == [late] and late.finish == FinishReason.DEADLINE and late.slot is None
    assert scheduler.waiting == 0 and running.slot is not None, "the running one keeps its slot"


def test_refusals_and_illegal_moves() -> None:
    gen, _ = engine()
    with pytest.raises(ValueError, match="exceed the context"):
        gen.submit(Sequence("big", "t", [1] * 60, max_tokens=10))
    with pytest.raises(ValueError, match="prompt"):
        gen.submit(Sequence("empty", "t", [], max_tokens=1))
    with pytest.raises(ValueError, match="not allowed"):
        Sequence("s", "t", [1], 1).move(SeqState.DECODING)
    with pytest.raises(ValueError, match="top_p"):
        Sampling(temperature=1.0, top_p=0.0)
    with pytest.raises(ValueError, match="temperature"):
        Sampling(temperature=float("nan"))
    with pytest.raises(ValueError, match="budget"):
        Scheduler(8, 8, VirtualTokenCounter())


def test_seeded_sampling_repeats_and_top_k_one_is_greedy() -> None:
    outputs = []
    for _ in range(2):
        gen, _ = engine()
        gen.submit(Sequence("s", "t", [3], max_tokens=5), Sampling(temperature=1.0, seed=7))
        gen.submit(Sequence("k", "t", [3], max_tokens=5), Sampling(temperature=5.0, top_k=1, seed=1))
        outputs.append(run(gen))
    assert outputs[0] == outputs[1], "the same seed, the same tokens"
    assert outputs[0]["k"] == ([4, 5, 6, 7, 8], FinishReason.LENGTH)
