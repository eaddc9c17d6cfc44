"""Prefix caching over the engine's slots, with a fake model: a tenant's next prompt that
starts with what its finished generation computed prefills only the rest, in that slot;
another tenant's identical prompt computes everything (no cross-tenant timing channel); the
least recently used slot is the one rewritten; a preempted sequence resumes from its own
cache; outputs never change."""

from __future__ import annotations

from generation_fakes import CountingModel

from ferryman_server.gpu_node.generation.engine import GenerationEngine
from ferryman_server.gpu_node.generation.prefix import PrefixCache
from ferryman_server.gpu_node.generation.scheduler import Scheduler, Sequence, VirtualTokenCounter

MAX_LEN = 128
SYSTEM = list(range(10, 40))
"""A long shared start: a chat's system prompt."""


def engine(slots: int = 2, enabled: bool = True) -> tuple[GenerationEngine, CountingModel]:
    model = CountingModel()
    scheduler = Scheduler(slots, 64, VirtualTokenCounter(), prefix_cache=enabled)
    return GenerationEngine(model, scheduler, MAX_LEN, stop_tokens=(), clock=lambda: 0.0), model


def generate(e: GenerationEngine, seq: Sequence) -> list[int]:
    e.submit(seq)
    tokens: list[int] = []
    while not e.idle:
        tokens += [ev.token for ev in e.step() if ev.seq_id == seq.id and ev.token is not None]
    return tokens


def test_a_tenants_next_turn_prefills_only_what_is_new() -> None:
    e, model = engine()
    first = generate(e, Sequence("t1", "acme", [*SYSTEM, 1, 2], max_tokens=4))
    model.prefills.clear()
    # The next turn repeats the system prompt, the first question and its answer.
    second_prompt = [*SYSTEM, 1, 2, *first, 7, 8]
    second = generate(e, Sequence("t2", "acme", second_prompt, max_tokens=4))
    [(_, start, computed)] = model.prefills
    # Cached: the system prompt, the question and all but the last answer token (never fed).
    assert start == len(SYSTEM) + 2 + len(first) - 1
    assert computed == len(second_prompt) - start
    cold, _ = engine(enabled=False)
    assert second == generate(cold, Sequence("t2", "acme", second_prompt, max_tokens=4))
    assert e.scheduler.prefix.hits == 1 and e.scheduler.prefix.reused_tokens == start


def test_another_tenants_identical_prompt_computes_everything() -> None:
    e, model = engine()
    prompt = [*SYSTEM, 1, 2]
    generate(e, Sequence("a", "acme", prompt, max_tokens=2))
    model.prefills.clear()
    generate(e, Sequence("b", "globex", prompt, max_tokens=2))
    assert [(start, computed) for _, start, computed in model.prefills] == [(0, len(prompt))]
    assert e.scheduler.prefix.hits == 0
    # ...while acme's own repeat is served from its cache.
    model.prefills.clear()
    generate(e, Sequence("a2", "acme", prompt, max_tokens=2))
    assert [start for _, start, _ in model.prefills] == [len(prompt) - 1]


def test_an_identical_prompt_still_computes_its_last_token() -> None:
    e, model = engine()
    prompt = [*SYSTEM, 1]
    generate(e, Sequence("a", "acme", prompt, max_tokens=1))
    model.prefills.clear()
    generate(e, Sequence("b", "acme", prompt, max_tokens=1))
    assert [(start, computed) for _, start, computed in model.prefills] == [(len(prompt) - 1, 1)]


def test_the_least_recently_used_slot_is_rewritten() -> None:
    cache = PrefixCache(3)
    free = [0, 1, 2]
    acme = ("acme", 0)
    a, _ = cache.take(free, acme, [1, 2, 3])
    b, _ = cache.take(free, acme, [4, 5, 6])
    c, _ = cache.take(free, acme, [7, 8, 9])
    for slot, tokens in ((a, [1, 2, 3]), (b, [4, 5, 6]), (c, [7, 8, 9])):
        cache.leave(slot, acme, tokens)
        free.append(slot)
    # Slot a's prefix is used again, so b's (the least recent) is the one a new prompt evicts.
    assert cache.take(free, acme, [1, 2, 3, 4]) == (a, 3)
    assert cache.take(free, acme, [99, 98]) == (b, 0)
    assert free == [c]


def test_the_same_tenants_prompt_under_another_adapter_computes_everything() -> None:
    e, model = engine()
    prompt = [*SYSTEM, 1, 2]
    generate(e, Sequence("a", "acme", prompt, max_tokens=2, adapter=1))
    model.prefills.clear()
    generate(e, Sequence("b", "acme", prompt, max_tokens=2, adapter=2))
    generate(e, Sequence("c", "acme", prompt, max_tokens=2))
    assert [start for _, start, _ in model.prefills] == [0, 0]


def test_off_every_prompt_is_computed_whole() -> None:
    e, model = engine(enabled=False)
    prompt = [*SYSTEM, 1]
    generate(e, Sequence("a", "acme", prompt, max_tokens=1))
    generate(e, Sequence("b", "acme", prompt, max_tokens=1))
    assert [start for _, start, _ in model.prefills] == [0, 0]
