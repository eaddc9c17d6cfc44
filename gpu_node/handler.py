"""The handler API: what a model of format ``python`` implements (the public, typed home).

A handler is for models that need pre/post-processing (tokenizers, pooling). Registered as
``module:Class`` (``ferryman model register ... --format python --handler mypkg.model:MyHandler``),
it is imported by that name in the node, instantiated with no arguments, loaded once, then
called with whole batches::

    from pathlib import Path
    from collections.abc import Mapping

    import torch
    from ferryman_server.gpu_node.handler import BatchInput, RuntimeOutput

    class MyHandler:
        def load(self, path: Path, device: torch.device) -> None: ...
        def predict(
            self, inputs: Mapping[str, BatchInput], parameters: Mapping[str, str]
        ) -> RuntimeOutput: ...

``inputs`` maps each schema input to a batch tensor (first dimension = rows) or one string per
row; ``predict`` runs in a worker thread, never on the node's event loop, and raises on a
model error (the node then isolates the failing rows). Handler modules are the author's own:
no name of the platform's shadows them (the platform's modules all live under
``ferryman_server``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import torch

BatchInput = torch.Tensor | list[str]
"""A batch input: a tensor whose first dimension is rows, or one string per row."""


@dataclass
class RuntimeOutput:
    """Outputs by name (first dimension = rows) and optional input tokens per row."""

    outputs: dict[str, torch.Tensor]
    input_tokens: Sequence[int] = field(default_factory=list)


class Handler(Protocol):
    """A ``python``-format model: loaded once from its artifact, then called per batch."""

    def load(self, path: Path, device: torch.device) -> None:
        """Read the artifact at ``path`` (a file or directory) onto ``device``."""
        ...

    def predict(
        self, inputs: Mapping[str, BatchInput], parameters: Mapping[str, str]
    ) -> RuntimeOutput | Mapping[str, torch.Tensor]:
        """One batch's outputs by name (a mapping of tensors is read as ``RuntimeOutput``)."""
        ...
