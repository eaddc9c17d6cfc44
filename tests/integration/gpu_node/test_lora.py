"""LoRA adapters on the real SmolLM2 (float32, exact): two tenants' adapters, made here from
seeded weights in PEFT's format, decode in one batch beside the base model; each row equals
its solo run, an adapter's answer equals the base model with that adapter's deltas merged
into its weights, and the adapters change what the model computes."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from lora_helpers import ALPHA, RANK, TARGETS, write_adapter
from safetensors.torch import save_file

from ferryman_server.gpu_node.demo import smollm2
from ferryman_server.gpu_node.generation import lora
from ferryman_server.gpu_node.generation.engine import GenerationEngine
from ferryman_server.gpu_node.generation.llama import SlotLlama
from ferryman_server.gpu_node.generation.scheduler import Scheduler, Sequence, VirtualTokenCounter

SLOTS, MAX_LEN, STEP_TOKENS = 4, 256, 128
TOKENS = 12


@pytest.fixture(scope="module")
def smol(smollm2_artifact: Path) -> tuple[Any, Any]:
    torch.set_num_threads(1)
    return smollm2.load(smollm2_artifact)


def merged(model: Any, weights: dict[str, torch.Tensor]) -> Any:
    """The base model with an adapter's deltas folded into its weights: the reference."""
    copied = copy.deepcopy(model)
    with torch.no_grad():
        for i, layer in enumerate(copied.model.layers):
            for target in TARGETS:
                stem = f"base_model.model.model.layers.{i}.{target}"
                delta = weights[f"{stem}.lora_B.weight"] @ weights[f"{stem}.lora_A.weight"]
                layer.get_submodule(target).weight += ALPHA / RANK * delta
    return copied


def run(model: SlotLlama, stop: int, sequences: list[Sequence]) -> dict[str, list[int]]:
    engine = GenerationEngine(model, Scheduler(SLOTS, STEP_TOKENS, VirtualTokenCounter()), MAX_LEN, {stop})
    for seq in sequences:
        engine.submit(seq)
    out: dict[str, list[int]] = {seq.id: [] for seq in sequences}
    while not engine.idle:
        for event in engine.step():
            if event.token is not None:
                out[event.seq_id].append(event.token)
    return out


def prompt(tokenizer: Any, question: str) -> list[int]:
    encoded = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True
    )
    return [int(i) for i in (encoded if isinstance(encoded, list) else encoded["input_ids"])]


def test_two_adapters_in_one_batch_equal_their_solo_runs_and_merged_weights(
    smol: tuple[Any, Any], tmp_path: Path
) -> None:
    model, tokenizer = smol
    weights = {
        name: write_adapter(tmp_path / name, model, seed) for name, seed in (("acme", 1), ("globex", 2))
    }
    slot_model = SlotLlama.of_model(model, SLOTS, MAX_LEN, torch.float32)
    ids = {name: slot_model.add_adapter(tmp_path / name) for name in weights}
    capital, river = prompt(tokenizer, "What is the capital of France?"), prompt(tokenizer, "Name a river.")
    batch = [
        Sequence("base", "t0", capital, TOKENS),
        Sequence("acme", "acme", capital, TOKENS, adapter=ids["acme"]),
        Sequence("globex", "globex", capital, TOKENS, adapter=ids["globex"]),
        Sequence("acme-river", "acme", river, TOKENS, adapter=ids["acme"]),
    ]
    together = run(slot_model, tokenizer.eos_token_id, batch)
    for seq in batch:
        solo = Sequence(seq.id, seq.tenant, seq.prompt, TOKENS, adapter=seq.adapter)
        assert together[seq.id] == run(slot_model, tokenizer.eos_token_id, [solo])[seq.id], seq.id
    # Each adapter changes what the model computes (greedy tokens may still agree).
    base = slot_model.prefill(0, capital, 0)
    for name, index in ids.items():
        assert (slot_model.prefill(0, capital, 0, index) - base).abs().max() > 0.1, name
    assert together["acme"] != together["base"]
    for name in weights:
        reference = SlotLlama.of_model(merged(model, weights[name]), SLOTS, MAX_LEN, torch.float32)
        alone = run(reference, tokenizer.eos_token_id, [Sequence(name, name, capital, TOKENS)])
        assert together[name] == alone[name], name


def test_an_adapter_that_does_not_fit_the_model_is_refused(smol: tuple[Any, Any], tmp_path: Path) -> None:
    model, _ = smol
    path = tmp_path / "wrong"
    path.mkdir()
    (path / lora.CONFIG).write_text(json.dumps({"r": 4, "lora_alpha": 8}))
    stem = "base_model.model.model.layers.0.self_attn.q_proj"
    save_file(
        {f"{stem}.lora_A.weight": torch.zeros(4, 576), f"{stem}.lora_B.weight": torch.zeros(7, 4)},
        str(path / lora.WEIGHTS),
    )
    slot_model = SlotLlama.of_model(model, 1, 64, torch.float32)
    with pytest.raises(ValueError, match="lora_B"):
        slot_model.add_adapter(path)
    (path / lora.CONFIG).write_text(json.dumps({"r": 100_000, "lora_alpha": 8}))
    with pytest.raises(ValueError, match="rank"):
        slot_model.add_adapter(path)
