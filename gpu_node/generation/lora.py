"""LoRA adapters over a loaded causal LM: many adapters in one batch, each row its own.

An adapter is a PEFT-format directory (``adapter_config.json`` with ``r``, ``lora_alpha`` and
``target_modules``; ``adapter_model.safetensors`` with ``...layers.{i}.{module}.lora_A.weight``
[r, in] and ``lora_B.weight`` [out, r]): each targeted projection becomes
``W x + (alpha / r) B (A x)``. The base weights are shared; only the low-rank factors are
per adapter (SmolLM2 at r = 8 on every projection: 4.9 MB in float32). ``SlotLlama`` adds
each row's delta after its projection, grouped by adapter, so tenants' fine-tunes of one base
decode in the same batch. The delta stays float32 whatever the base's precision: it is
small, and exact.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

CONFIG = "adapter_config.json"
WEIGHTS = "adapter_model.safetensors"
MAX_RANK = 256
"""An adapter's rank at most: its factors' cost per token grows with it."""
GROUPS: dict[str, tuple[str, ...]] = {
    "qkv": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    "out": ("self_attn.o_proj",),
    "gate_up": ("mlp.gate_proj", "mlp.up_proj"),
    "down": ("mlp.down_proj",),
}
"""The engine's stacked projections and the modules each stacks, in its order."""

Factors = tuple[torch.Tensor, torch.Tensor]
"""``(A [k, in], B [out, k])`` of one stacked projection: its delta is ``B (A x)``."""


@dataclass(frozen=True)
class Adapter:
    """One adapter's factors per layer, by stacked projection (absent: not targeted)."""

    layers: list[dict[str, Factors]]


def is_adapter(path: Path) -> bool:
    """Whether an artifact is a LoRA adapter directory rather than a model."""
    return (path / CONFIG).is_file()


def base_of(path: Path) -> str:
    """The base version an adapter runs over, ``model:version``: PEFT's
    ``base_model_name_or_path`` in its config, read as a Ferryman version."""
    base = json.loads((path / CONFIG).read_text()).get("base_model_name_or_path")
    if not isinstance(base, str) or base.count(":") != 1:
        raise ValueError("base_model_name_or_path must name the base version as model:version")
    return base


def stacked(
    weights: Mapping[str, torch.Tensor], layer: int, modules: tuple[str, ...], widths: list[int], scale: float
) -> Factors | None:
    """The stacked projection's factors from each module's: A's rows side by side, B's as a
    block diagonal (a module not targeted contributes a zero block of its output width)."""
    found: list[tuple[Factors | None, int]] = []
    for module, width in zip(modules, widths, strict=True):
        stem = next((k for k in weights if k.endswith(f"layers.{layer}.{module}.lora_A.weight")), None)
        if stem is None:
            found.append((None, width))
            continue
        a = weights[stem].float()
        b = weights[stem.replace("lora_A", "lora_B")].float()
        if b.shape != (width, a.shape[0]):
            raise ValueError(
                f"layer {layer} {module}: lora_B {tuple(b.shape)} does not fit ({width}, {a.shape[0]})"
            )
        found.append(((a, b), width))
    present = [factors for factors, _ in found if factors is not None]
    if not present:
        return None
    a_all = torch.cat([a for a, _ in present])
    b_all = torch.zeros(sum(width for _, width in found), a_all.shape[0])
    row = col = 0
    for factors, width in found:
        if factors is not None:
            a, b = factors
            b_all[row : row + width, col : col + a.shape[0]] = b * scale
            col += a.shape[0]
        row += width
    return a_all.contiguous(), b_all.contiguous()


def load(path: Path, layers: int, widths: Mapping[str, list[int]], device: torch.device) -> Adapter:
    """The adapter at ``path`` for a model of ``layers`` layers whose stacked projections have
    ``widths`` (each module's output width); a ValueError if it does not fit the model."""
    from safetensors.torch import load_file

    config = json.loads((path / CONFIG).read_text())
    rank, alpha = int(config["r"]), float(config.get("lora_alpha", config["r"]))
    if not 0 < rank <= MAX_RANK:
        raise ValueError(f"rank {rank} is not between 1 and {MAX_RANK}")
    weights = load_file(str(path / WEIGHTS))
    adapter = Adapter(
        [
            {
                name: (a.to(device), b.to(device))
                for name, modules in GROUPS.items()
                if (factors := stacked(weights, i, modules, widths[name], alpha / rank)) is not None
                for a, b in [factors]
            }
            for i in range(layers)
        ]
    )
    if not any(adapter.layers):
        raise ValueError("the adapter targets none of the model's projections")
    return adapter
