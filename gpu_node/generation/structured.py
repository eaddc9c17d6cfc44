"""Structured output: JSON mode and JSON schemas by constrained decoding, with llguidance.

A generation asked for JSON gets a ``JsonConstraint``. At each step it masks every token
that could not continue a valid output, and the engine samples from what is left. Once the
output is complete it allows only the end-of-turn token, so the answer always parses, and
validates against the schema. llguidance is the grammar engine vLLM and SGLang use: it
compiles a JSON schema to a grammar and computes a step's allowed tokens (49,152 for SmolLM2)
in well under a millisecond, off the GIL. Its tokenizer view costs about a second to build,
so it is built once per loaded model, on the first structured request.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import llguidance
import numpy as np
import torch

from ferryman.v1 import common_pb2
from ferryman_server.gpu_node.generation.scheduler import FinishReason
from ferryman_server.gpu_node.generation.tokenizer import ChatTokenizer

if TYPE_CHECKING:
    from llguidance._lib import JsonCompileOptions

LAYOUT: JsonCompileOptions = {
    "whitespace_flexible": False,
    "item_separator": ", ",
    "key_separator": ": ",
}
"""Fixed spacing between items and after keys, and no other whitespace: a small model left
free whitespace can spend its whole budget on newlines."""


class JsonConstraint:
    """One generation's grammar state: which tokens may come next, fed each token drawn."""

    def __init__(self, matcher: Any) -> None:
        self._matcher = matcher

    def allowed(self, vocab: int) -> torch.Tensor:
        """What the grammar allows next, as a bool mask [vocab] on the host (a model head
        wider than the tokenizer: its extra tokens are never allowed)."""
        bits = np.frombuffer(self._matcher.compute_bitmask(), dtype=np.uint8)
        allowed = torch.from_numpy(np.unpackbits(bits, bitorder="little").astype(bool))
        if allowed.shape[-1] < vocab:
            allowed = torch.cat([allowed, torch.zeros(vocab - allowed.shape[-1], dtype=torch.bool)])
        return allowed[:vocab]

    def consume(self, token: int) -> None:
        """Feed the token drawn (one the mask allowed)."""
        self._matcher.consume_token(token)

    @property
    def finished(self) -> FinishReason | None:
        """STOP once the output is complete (nothing but the end of the turn may follow),
        ERROR if the grammar failed (a parser limit reached), else None."""
        if self._matcher.is_error():
            return FinishReason.ERROR
        return FinishReason.STOP if self._matcher.is_stopped() else None


class StructuredOutputs:
    """Constraints for one loaded model's generations; thread-safe."""

    def __init__(self, tokenizer: ChatTokenizer) -> None:
        self._chat_tokenizer = tokenizer
        self._tokenizer: Any = None
        self._lock = threading.Lock()

    def _llg_tokenizer(self) -> Any:
        with self._lock:
            if self._tokenizer is None:
                chat = self._chat_tokenizer
                self._tokenizer = llguidance.LLTokenizer(chat.serialized(), eos_token=chat.eos_token_id)
            return self._tokenizer

    def constraint(self, sampling: common_pb2.SamplingParams) -> JsonConstraint | None:
        """The constraint ``sampling`` asks for (None: free text). Blocks while the grammar
        compiles; a schema llguidance cannot compile is a ValueError naming why."""
        which = sampling.WhichOneof("structured")
        if which is None or (which == "json_object" and not sampling.json_object):
            return None
        schema = '{"type": "object"}' if which == "json_object" else sampling.json_schema
        try:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=LAYOUT)
        except ValueError as exc:
            raise ValueError(f"json_schema: {str(exc)[:500]}") from None
        tokenizer = self._llg_tokenizer()
        # llguidance's default parser limits bound a hostile schema: a grammar of at most
        # 500,000 symbols, and per step 50,000 parser items and 200,000 units of lexer fuel
        # (milliseconds); past them the matcher fails and the generation ends.
        matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise ValueError(f"json_schema: {matcher.get_error()[:500]}")
        return JsonConstraint(matcher)
