"""What every runtime offers the node: a batched, synchronous predict."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from ferryman_server.gpu_node.handler import BatchInput, RuntimeOutput


class Runtime(Protocol):
    """A loaded model version. ``predict`` runs in a worker thread, never on the event loop."""

    def predict(self, inputs: Mapping[str, BatchInput], parameters: Mapping[str, str]) -> RuntimeOutput:
        """Run one batch; raise on model errors (the node reports them per item)."""
        ...
