"""What bounds one generation, decided before and while it runs (pure, no torch): how
many tokens it may produce and why reaching them ends it, and where a stop string cuts
its text."""

from __future__ import annotations

from collections.abc import Iterable

from ferryman_server.gpu_node.generation.scheduler import FinishReason


class OverBudget(ValueError):
    """The prompt alone uses more tokens than the generation's budget."""


def completion_limit(prompt: int, max_tokens: int, budget: int, context: int) -> tuple[int, FinishReason]:
    """Tokens a generation may produce, and what reaching them means: ``max_tokens`` cut
    to the model's context (LENGTH) and to its token budget, prompt included (QUOTA;
    0: none). Raises OverBudget when the prompt alone is over the budget, ValueError when it
    is over the context."""
    if prompt > context:
        raise ValueError(f"the prompt's {prompt} tokens exceed the context of {context}")
    limit, reason = min(max_tokens, context - prompt + 1), FinishReason.LENGTH
    if budget:
        if budget - prompt < 1:
            raise OverBudget(f"the prompt's {prompt} tokens leave nothing of a budget of {budget}")
        if budget - prompt < limit:
            limit, reason = budget - prompt, FinishReason.QUOTA
    return limit, reason


class StopText:
    """Text deltas cut where a stop string first appears. Text that may be the start of
    one is held back until it is known not to be."""

    def __init__(self, stops: Iterable[str]) -> None:
        self._stops = [s for s in stops if s]
        self._pending = ""

    def add(self, delta: str) -> tuple[str, bool]:
        """(text that can be emitted now, whether a stop string was reached)."""
        if not self._stops:
            return delta, False
        text = self._pending + delta
        found = [i for stop in self._stops if (i := text.find(stop)) >= 0]
        if found:
            self._pending = ""
            return text[: min(found)], True
        held = next(
            (
                k
                for k in range(min(len(text), max(len(s) for s in self._stops) - 1), 0, -1)
                if any(stop.startswith(text[-k:]) for stop in self._stops)
            ),
            0,
        )
        self._pending = text[len(text) - held :]
        return text[: len(text) - held], False

    def flush(self) -> str:
        """What was held back, once the generation ended otherwise."""
        pending, self._pending = self._pending, ""
        return pending
