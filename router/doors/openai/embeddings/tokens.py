"""Token arrays in ``/v1/embeddings``: the ids an OpenAI client sends, read back into text.

A client that counts tokens before it sends (LangChain's ``OpenAIEmbeddings`` with its default
``check_embedding_ctx_length``) encodes with tiktoken's encoding for the model's name, which is
``cl100k_base`` for every name tiktoken does not know, Ferryman's models among them. Those ids
mean nothing to the model's own tokenizer (MiniLM's WordPiece would read them as other words), so
the door reads them back into text with ``cl100k_base`` and the model tokenizes that text as it
would any other: the answer is the embedding of what the client meant.

The vocabulary comes with the ``bpe-openai`` package (nothing is downloaded) and costs ~100 MB,
so it is loaded the first time a token array arrives, once (callers on the event loop read token
arrays in a worker thread). Even importing the package builds tables (0.4 s, 60 MB): a router
that never sees a token array never imports it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ferryman_server.router.failures import invalid

if TYPE_CHECKING:
    import bpe_openai

ENCODING = "cl100k_base"
MAX_TOKEN_IDS = 300_000
"""Token ids one request may send in all (OpenAI's own limit per embeddings request):
checked before any is read, so a body of millions of ids costs no decoding."""


class TokenText:
    """Reads ``ENCODING`` ids back into text; the vocabulary is loaded on first use."""

    def __init__(self, encoding: str = ENCODING) -> None:
        self._name = encoding
        self._lock = threading.Lock()
        self._encoding: bpe_openai.Encoding | None = None

    def _loaded(self) -> bpe_openai.Encoding:
        with self._lock:
            if self._encoding is None:
                import bpe_openai

                self._encoding = bpe_openai.get_encoding(self._name)
            return self._encoding

    def texts(self, arrays: Sequence[Sequence[int]]) -> list[str]:
        """Each array's text; an id outside the vocabulary is INVALID_ARGUMENT. Blocks while the
        vocabulary loads."""
        if sum(len(array) for array in arrays) > MAX_TOKEN_IDS:
            raise invalid("input", f"more than {MAX_TOKEN_IDS} token ids")
        encoding = self._loaded()
        top = encoding.max_token_value
        texts = []
        for array in arrays:
            if not array:
                raise invalid("input", "an empty token array")
            # Checked here, not by the tokenizer: a negative id would wrap around to a special token.
            if not all(0 <= token <= top for token in array):
                raise invalid("input", f"token ids are {self._name} ids, 0 to {top}")
            try:
                # A client that splits a long text cuts between tokens, which can fall inside one
                # character: that half reads as U+FFFD, as tiktoken's own decode does.
                texts.append(encoding.decode_bytes(array).decode("utf-8", errors="replace"))
            except KeyError:
                raise invalid("input", f"a token id that {self._name} does not use") from None
        return texts


TOKEN_TEXT = TokenText()
