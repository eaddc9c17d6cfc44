"""What every runtime offers the node: a batched, synchronous predict."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch

# A batch input: a tensor whose first dimension is rows, or one string per row.
BatchInput = torch.Tensor | list[str]


@dataclass
class RuntimeOutput:
    """Outputs by name (first dimension = rows) and optional input tokens per row."""

    outputs: dict[str, torch.Tensor]
    input_tokens: Sequence[int] = field(default_factory=list)


class Runtime(Protocol):
    """A loaded model version. ``predict`` runs in a worker thread, never on the event loop."""

    def predict(self, inputs: Mapping[str, BatchInput], parameters: Mapping[str, str]) -> RuntimeOutput:
        """Run one batch; raise on model errors (the node reports them per item)."""
        ...
