"""What the router derives from a request's inputs before it runs: a token bound, a price."""

from __future__ import annotations

from collections.abc import Sequence

from ferryman.v1 import common_pb2


def token_bound(inputs: Sequence[common_pb2.NamedTensor]) -> int:
    """An upper bound on the input tokens of a request, known before it runs.

    Tokenizers emit at most one token per UTF-8 byte of text (byte-level BPE reaches it;
    WordPiece stays at one per character) plus their sequence markers. Reserving this
    bound rather than a guess is what keeps token and cost limits exact: the commit
    settles the node's actual count, which never exceeds it. Tensors count none."""
    return sum(
        len(t.encode()) + MARKER_TOKENS_PER_TEXT
        for value in inputs
        if value.WhichOneof("value") == "text"
        for t in value.text.values
    )


MARKER_TOKENS_PER_TEXT = 2
"""Sequence markers a tokenizer adds per text ([CLS] and [SEP] for BERT-style models)."""


def price(items: int, tokens: int, per_item_usd: float, per_1k_tokens_usd: float) -> float:
    """Cost of a request in US dollars."""
    return items * per_item_usd + tokens / 1000 * per_1k_tokens_usd
