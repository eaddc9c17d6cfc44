"""LoRA adapters made in tests from seeded weights, in PEFT's format (nothing downloads)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from ferryman_server.gpu_node.generation import lora

RANK, ALPHA, STD = 8, 16, 0.05
TARGETS = ("self_attn.q_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.down_proj")
"""Some of each stacked projection's modules, not all: the stacking fills the rest with zeros."""


def write_adapter(path: Path, model: Any, seed: int, base: str = "") -> dict[str, torch.Tensor]:
    """A PEFT-format adapter of seeded factors over ``model`` (a transformers Llama), naming
    ``base`` (``model:version``) as its base; its factors by name, as written."""
    generator = torch.Generator().manual_seed(seed)
    weights = {}
    for i, layer in enumerate(model.model.layers):
        for target in TARGETS:
            module = layer.get_submodule(target)
            stem = f"base_model.model.model.layers.{i}.{target}"
            weights[f"{stem}.lora_A.weight"] = (
                torch.randn(RANK, module.in_features, generator=generator) * STD
            )
            weights[f"{stem}.lora_B.weight"] = (
                torch.randn(module.out_features, RANK, generator=generator) * STD
            )
    path.mkdir()
    config = {
        "r": RANK,
        "lora_alpha": ALPHA,
        "target_modules": [t.split(".")[-1] for t in TARGETS],
        "base_model_name_or_path": base,
    }
    (path / lora.CONFIG).write_text(json.dumps(config))
    save_file(weights, str(path / lora.WEIGHTS))
    return weights
