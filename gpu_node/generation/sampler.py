"""The batched sampler: one token for every row of a step's logits, all rows at once on the
model's device (greedy rows by argmax; sampled rows by temperature, top-k and top-p), each
row first masked to what its constraint allows.

The random draws are made on the host, one uniform number per sampled row, from the
sequence's own generator when it has a seed: a seeded generation gives the same tokens on
any device, and the device needs no generator of its own. Per step the host sends the
uniforms (and the masks of constrained rows) and reads back one id and one finite flag per
row, in one transfer.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

MAX_TEMPERATURE = 100.0
"""Past this, sampling is uniform noise; the router's public bound is tighter."""


@dataclass(frozen=True)
class Sampling:
    """Per-sequence sampling; temperature 0 is greedy (and ignores the rest)."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None

    def __post_init__(self) -> None:
        # Written so that NaN fails too: one NaN temperature would fail the step for every
        # running sequence.
        if not (0 <= self.temperature <= MAX_TEMPERATURE and 0 < self.top_p <= 1 and self.top_k >= 0):
            raise ValueError(f"0 <= temperature <= {MAX_TEMPERATURE:g}, 0 < top_p <= 1 and top_k >= 0")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


GREEDY = Sampling()


@dataclass(frozen=True)
class Drawn:
    """A step's draw: per row, the token and whether the row's logits were all finite (a
    row that was not is that sequence's failure: its token means nothing)."""

    tokens: list[int]
    finite: list[bool]


class Sampler:
    """Sampling settings and random streams of the sequences an engine runs."""

    def __init__(self) -> None:
        self._settings: dict[str, Sampling] = {}
        self._streams: dict[str, random.Random] = {}
        self._unseeded = random.Random()

    def add(self, seq_id: str, sampling: Sampling) -> None:
        self._settings[seq_id] = sampling
        if not sampling.greedy and sampling.seed is not None:
            self._streams[seq_id] = random.Random(sampling.seed)

    def remove(self, seq_id: str) -> None:
        self._settings.pop(seq_id, None)
        self._streams.pop(seq_id, None)

    def draw(
        self, logits: torch.Tensor, seq_ids: Sequence[str], allowed: Mapping[int, torch.Tensor]
    ) -> Drawn:
        """One token per row of ``logits`` [rows, vocab] (on the model's device) for the
        sequences ``seq_ids``, in order; ``allowed``: row -> the host's bool mask of what that
        row's constraint allows (rows without one may take any token)."""
        settings = [self._settings[seq_id] for seq_id in seq_ids]
        uniforms = [
            0.0 if s.greedy else self._stream(seq_id).random()
            for seq_id, s in zip(seq_ids, settings, strict=True)
        ]
        return sample(logits, settings, uniforms, allowed)

    def _stream(self, seq_id: str) -> random.Random:
        return self._streams.get(seq_id, self._unseeded)


def sample(
    logits: torch.Tensor,
    settings: Sequence[Sampling],
    uniforms: Sequence[float],
    allowed: Mapping[int, torch.Tensor],
) -> Drawn:
    """Pure: row i's token under ``settings[i]``, its random draw ``uniforms[i]`` in [0, 1)
    (inverse-CDF sampling over its kept tokens, most likely first), masked by ``allowed[i]``."""
    device = logits.device
    rows, vocab = logits.shape
    finite = torch.isfinite(logits).all(-1)
    scores = logits.float()
    if allowed:
        masked = torch.tensor(sorted(allowed), device=device)
        host = torch.stack([allowed[i] for i in sorted(allowed)])
        keep = scores.new_ones((rows, vocab), dtype=torch.bool)
        keep[masked] = host.to(device, non_blocking=True)
        scores = scores.masked_fill(~keep, float("-inf"))
    tokens = scores.argmax(-1)
    sampled = [i for i, s in enumerate(settings) if not s.greedy]
    if sampled:
        index = torch.tensor(sampled, device=device)
        params = torch.tensor(
            [
                [settings[i].temperature, settings[i].top_p, settings[i].top_k or vocab, uniforms[i]]
                for i in sampled
            ],
            device=device,
        )
        temperature, top_p, top_k, uniform = params.unbind(-1)
        ordered, order = torch.sort(scores[index] / temperature[:, None], descending=True, stable=True)
        rank = torch.arange(vocab, device=device)
        ordered = ordered.masked_fill(rank[None, :] >= top_k[:, None], float("-inf"))
        probs = torch.softmax(ordered, -1)
        # Keep the smallest prefix whose mass reaches top_p (the most likely token always).
        probs = probs.masked_fill(probs.cumsum(-1) - probs >= top_p[:, None], 0.0)
        cdf = probs.cumsum(-1)
        pick = torch.searchsorted(cdf, (uniform * cdf[:, -1])[:, None], right=True).clamp_(max=vocab - 1)
        tokens[index] = order.gather(-1, pick).squeeze(-1)
    # One transfer back: the ids and the finite flags together.
    both = torch.stack([tokens, finite.long()]).tolist()
    return Drawn(tokens=both[0], finite=[bool(f) for f in both[1]])
