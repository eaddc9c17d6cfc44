"""The node's chat tokenizer on a tiny word-level tokenizer: the template renders with the
special tokens as variables, and stays inside jinja2's sandbox (an artifact's template is
code the node runs)."""

from __future__ import annotations

import json
from pathlib import Path

import jinja2
import pytest
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace

from ferryman_server.gpu_node.generation.tokenizer import ChatTokenizer

VOCAB = {"[UNK]": 0, "<s>": 1, "</s>": 2, "user": 3, "hi": 4, "assistant": 5, ":": 6}
TEMPLATE = (
    "{% set ns = namespace(turns=0) %}"
    "{% for m in messages %}{% set ns.turns = ns.turns + 1 %}{{ bos_token }}{{ m['role'] }} : "
    "{{ m['content'] }}{{ eos_token }}{% endfor %}"
    "{% if add_generation_prompt %}{{ bos_token }}assistant :{% endif %}"
)


def artifact(root: Path, template: str = TEMPLATE) -> Path:
    tokenizer = Tokenizer(WordLevel(VOCAB, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = Whitespace()
    tokenizer.add_special_tokens(["<s>", "</s>"])
    tokenizer.save(str(root / "tokenizer.json"))
    config = {"bos_token": "<s>", "eos_token": {"content": "</s>"}, "unk_token": "[UNK]"}
    (root / "tokenizer_config.json").write_text(json.dumps(config))
    (root / "chat_template.jinja").write_text(template)
    return root


def test_a_chat_renders_through_the_template_with_its_special_tokens(tmp_path: Path) -> None:
    tokenizer = ChatTokenizer(artifact(tmp_path))
    assert tokenizer.eos_token_id == VOCAB["</s>"]
    ids = tokenizer.chat_ids([{"role": "user", "content": "hi"}])
    assert ids == [1, 3, 6, 4, 2, 1, 5, 6]
    assert tokenizer.decode(ids) == "user : hi assistant :"
    assert tokenizer.chat_ids([{"role": "user", "content": "hi"}], add_generation_prompt=False) == ids[:5]
    assert json.loads(tokenizer.serialized())["model"]["type"] == "WordLevel"


@pytest.mark.parametrize(
    "template",
    [
        "{% set ns = namespace(_hidden=1) %}{{ ns }}",
        "{% set ns = namespace() %}{% set ns._hidden = 1 %}",
        "{{ ''.__class__.__mro__ }}",
        "{{ messages.append(1) }}",
    ],
)
def test_a_template_cannot_leave_the_sandbox(tmp_path: Path, template: str) -> None:
    tokenizer = ChatTokenizer(artifact(tmp_path, template))
    with pytest.raises(jinja2.exceptions.SecurityError):
        tokenizer.chat_ids([{"role": "user", "content": "hi"}])


def test_an_artifact_without_a_chat_template_is_refused(tmp_path: Path) -> None:
    root = artifact(tmp_path)
    (root / "chat_template.jinja").unlink()
    with pytest.raises(ValueError, match="no chat template"):
        ChatTokenizer(root)
