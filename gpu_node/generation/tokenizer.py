"""A causal LM's tokenizer without transformers: the ``tokenizers`` library reads the
artifact's ``tokenizer.json``, and its chat template renders as transformers renders it:
a sandboxed, immutable jinja2 environment with ``trim_blocks``, ``lstrip_blocks``, loop
controls and a namespace that refuses underscore names, the special tokens as variables,
and the result tokenized without added special tokens. Importing transformers costs a
node about 2 s and 160 MB at start; this is what the node needs of it.
``tests/integration/gpu_node/test_generation.py`` checks ids, chat prompts and text
against transformers' own tokenizer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "pad_token")
TEMPLATE_FILE = "chat_template.jinja"


def _raise(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    value: Any, ensure_ascii: bool = False, indent: int | None = None, sort_keys: bool = False
) -> str:
    # Jinja's own tojson escapes HTML characters, which templates do not expect.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, sort_keys=sort_keys)


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


class _Namespace(jinja2.utils.Namespace):
    """``namespace()`` in a template, refusing underscore names (a way out of the sandbox)."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # Jinja's own signature trick
        self, rest = args[0], args[1:]
        for name in dict(*rest, **kwargs):
            _Namespace._check(name)
        jinja2.utils.Namespace.__init__(self, *rest, **kwargs)

    def __setitem__(self, name: str, value: Any) -> None:
        _Namespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name: object) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"a chat template may not set {name!r} on a namespace")


def _token_text(value: object) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or ``{"content": ...}``."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


class ChatTokenizer:
    """Encode, decode and render chats for one model (thread-safe: it only reads)."""

    def __init__(self, path: Path) -> None:
        self.backend = Tokenizer.from_file(str(path / "tokenizer.json"))
        config = json.loads((path / "tokenizer_config.json").read_text())
        self.special = {name: text for name in SPECIAL_TOKENS if (text := _token_text(config.get(name)))}
        eos = self.special.get("eos_token")
        self.eos_token_id: int | None = self.backend.token_to_id(eos) if eos else None
        template_file = path / TEMPLATE_FILE
        template = template_file.read_text() if template_file.exists() else config.get("chat_template")
        if not isinstance(template, str):
            raise ValueError(f"{path}: no chat template ({TEMPLATE_FILE} or tokenizer_config.json)")
        environment = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
        )
        environment.filters["tojson"] = _tojson
        environment.globals["raise_exception"] = _raise
        environment.globals["strftime_now"] = _strftime_now
        environment.globals["namespace"] = _Namespace
        self._template = environment.from_string(template)

    def encode(self, text: str) -> list[int]:
        """A raw prompt's ids, with the special tokens the tokenizer adds around a text."""
        return list(self.backend.encode(text, add_special_tokens=True).ids)

    def chat_ids(
        self, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = True
    ) -> list[int]:
        """A chat's ids through the model's chat template (which writes the special tokens)."""
        text = self._template.render(
            messages=list(messages), add_generation_prompt=add_generation_prompt, **self.special
        )
        return list(self.backend.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return str(self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens))

    def serialized(self) -> str:
        """The tokenizer as JSON, without padding or truncation (what llguidance reads)."""
        copy = Tokenizer.from_str(self.backend.to_str())
        copy.no_padding()
        copy.no_truncation()
        return str(copy.to_str())
