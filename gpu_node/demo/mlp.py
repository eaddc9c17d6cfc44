"""``mlp``: float32 [N, 512] -> [N, 10], seeded weights, as TorchScript (the demo) or a
torch.export program."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

IN_FEATURES = 512
HIDDEN = 2048
OUT_FEATURES = 10
EXPORT_EXAMPLE_ROWS = 4
MAX_EXPORT_ROWS = 4096

SCHEMA = {
    "inputs": [{"name": "input", "dtype": "FP32", "shape": [IN_FEATURES]}],
    "outputs": [{"name": "output", "dtype": "FP32", "shape": [OUT_FEATURES]}],
    "max_items": 128,
}


def build_mlp(seed: int = 0) -> nn.Module:
    """The demo MLP with deterministic weights."""
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Linear(IN_FEATURES, HIDDEN),
        nn.ReLU(),
        nn.Linear(HIDDEN, HIDDEN),
        nn.ReLU(),
        nn.Linear(HIDDEN, OUT_FEATURES),
    )
    return model.eval()


def export_mlp(path: Path, seed: int = 0) -> Path:
    """Write the MLP as a torch.export program with a dynamic batch dimension."""
    model = build_mlp(seed)
    rows = torch.export.Dim("rows", min=1, max=MAX_EXPORT_ROWS)
    example = torch.randn(EXPORT_EXAMPLE_ROWS, IN_FEATURES)
    program = torch.export.export(model, (example,), dynamic_shapes=({0: rows},))
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.export.save(program, str(path))
    return path


def script_mlp(path: Path, seed: int = 0) -> Path:
    """Write the same MLP as TorchScript (the demo's artifact)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.jit.save(torch.jit.script(build_mlp(seed)), str(path))
    return path
