"""A fake causal LM for the engine's unit tests: its answers are known without a model."""

from __future__ import annotations

import torch

VOCAB = 50


class CountingModel:
    """Next token = last token + 1 (mod VOCAB); records each prefill (slot, start, tokens
    computed) and each decode's batch size."""

    def __init__(self) -> None:
        self.decode_batches: list[int] = []
        self.prefills: list[tuple[int, int, int]] = []

    def _logits(self, token: int) -> torch.Tensor:
        logits = torch.zeros(VOCAB)
        logits[(token + 1) % VOCAB] = 1.0
        return logits

    def prefill(self, slot: int, tokens: list[int], start: int, adapter: int = 0) -> torch.Tensor:
        self.prefills.append((slot, start, len(tokens)))
        return self._logits(tokens[-1])

    def decode(
        self, slots: list[int], tokens: list[int], positions: list[int], adapters: list[int] | None = None
    ) -> torch.Tensor:
        assert len(set(slots)) == len(slots), "one slot per running sequence"
        self.decode_batches.append(len(slots))
        return torch.stack([self._logits(t) for t in tokens])
