"""Tenants' LoRA adapters as versions over the served SmolLM2, through the whole platform
(registry, node placements, batcher, router, the SDK): each tenant's requests reach its own
adapter, private to it; two tenants' adapters and the base decode in one batch on the one
engine, each answer equal to its solo run; an adapter changes the answer."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from batcher_platform import register, wait_for_replicas
from generation_platform import MODEL, GenPlatform
from lora_helpers import write_adapter

import ferryman
from ferryman.sdk.errors import NotFound
from ferryman_server.gpu_node.demo import smollm2
from ferryman_server.registry.db import make_engine
from ferryman_server.registry.reader import RegistryReader

pytestmark = pytest.mark.slow

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
TOKENS = 12


def answer(gen: GenPlatform, key: str, model: str) -> str:
    with ferryman.Client(gen.router, key) as client:
        return "".join(chunk.text for chunk in client.chat(model, QUESTION, max_tokens=TOKENS))


def test_each_tenants_adapter_answers_it_alone_and_in_one_batch(
    gen: GenPlatform, smollm2_artifact: Path, tmp_path: Path
) -> None:
    model, _ = smollm2.load(smollm2_artifact)
    keys = {gen.names[key]: key for key in (gen.tenant(), gen.tenant())}
    fine_tunes = {}
    for seed, name in enumerate(sorted(keys), start=1):
        adapter = tmp_path / name
        write_adapter(adapter, model, seed, base=f"{MODEL}:1")
        fine_tunes[name] = f"ft-{name}"
        register(
            gen.writer, fine_tunes[name], "1", adapter, "causal_lm", smollm2.SCHEMA,
            max_batch=1, published=False, owners=(name,),
        )  # fmt: skip
        gen.writer.set_route(fine_tunes[name], {"1": 100})
    reader = RegistryReader(make_engine(gen.common.resolved_database_url()))
    wait_for_replicas(reader, ("gn1",), {f"{m}:1" for m in fine_tunes.values()})
    acme, globex = sorted(keys)
    asks = [(keys[acme], fine_tunes[acme]), (keys[globex], fine_tunes[globex]), (keys[acme], MODEL)]
    solo = [answer(gen, key, model_name) for key, model_name in asks]
    with ThreadPoolExecutor(len(asks)) as pool:
        together = list(pool.map(lambda ask: answer(gen, *ask), asks))
    assert together == solo
    assert solo[0] != solo[2], "the adapter changed the answer"
    # Private: another tenant's fine-tune is unknown to it.
    with pytest.raises(NotFound):
        answer(gen, keys[globex], fine_tunes[acme])
