"""A Llama forward over a preallocated KV cache of fixed slots, on the weights of a
transformers ``LlamaForCausalLM``.

transformers' own caches grow per sequence and batch only sequences of one length; the
engine needs what vLLM's model runners do: every running sequence at its own position in
one decode forward, and prefill chunks written into a sequence's slot. The modules (
projections, norms, rotary embedding, MLP) are transformers'; only attention over the slot
cache is written here. Memory is fixed at construction: ``slots`` x ``max_len`` positions
per layer, nothing allocated per step beyond activations."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.nn import functional as F
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

BYTES_PER_FLOAT32 = 4


@dataclass(frozen=True)
class CacheShape:
    layers: int
    slots: int
    kv_heads: int
    max_len: int
    head_dim: int

    @property
    def bytes(self) -> int:
        """Keys and values of every layer and slot."""
        return 2 * self.layers * self.slots * self.kv_heads * self.max_len * self.head_dim * BYTES_PER_FLOAT32


class SlotLlama:
    """``prefill`` one sequence's chunk, ``decode`` one token for many; both return the
    logits of each sequence's last position."""

    def __init__(self, model: Any, slots: int, max_len: int) -> None:
        config = model.config
        self._model = model.model
        self._lm_head = model.lm_head
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.shape = CacheShape(len(self._model.layers), slots, self.kv_heads, max_len, self.head_dim)
        size = (self.shape.layers, slots, self.kv_heads, max_len, self.head_dim)
        device = self._lm_head.weight.device
        self._keys = torch.zeros(size, dtype=torch.float32, device=device)
        self._values = torch.zeros(size, dtype=torch.float32, device=device)

    def _layer(
        self,
        index: int,
        x: torch.Tensor,
        positions: torch.Tensor,
        slots: torch.Tensor,
        visible: int,
        mask: torch.Tensor,
    ) -> torch.Tensor:
        """One decoder layer for ``x`` [B, T, H] at ``positions`` [B, T] in ``slots`` [B]."""
        layer = self._model.layers[index]
        attn = layer.self_attn
        batch, steps, _ = x.shape
        h = layer.input_layernorm(x)
        q = attn.q_proj(h).view(batch, steps, self.heads, self.head_dim).transpose(1, 2)
        k = attn.k_proj(h).view(batch, steps, self.kv_heads, self.head_dim).transpose(1, 2)
        v = attn.v_proj(h).view(batch, steps, self.kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = self._model.rotary_emb(v, positions)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        keys, values = self._keys[index], self._values[index]
        # [B, kv, T, d] into each slot at its own positions.
        rows = slots.view(batch, 1).expand(batch, steps)
        keys[rows, :, positions] = k.transpose(1, 2)
        values[rows, :, positions] = v.transpose(1, 2)
        out = F.scaled_dot_product_attention(
            q,
            keys[slots, :, :visible],
            values[slots, :, :visible],
            attn_mask=mask,
            scale=attn.scaling,
            enable_gqa=True,
        )
        x = x + attn.o_proj(out.transpose(1, 2).reshape(batch, steps, -1))
        result: torch.Tensor = x + layer.mlp(layer.post_attention_layernorm(x))
        return result

    def _run(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        visible = int(positions.max()) + 1
        # A query sees the keys of its own slot up to its own position, nothing after.
        mask = torch.arange(visible, device=positions.device).view(1, 1, visible) <= positions.unsqueeze(-1)
        mask = mask.unsqueeze(1)  # [B, 1, T, visible]: one mask for every head
        x = self._model.embed_tokens(tokens)
        for index in range(self.shape.layers):
            x = self._layer(index, x, positions, slots, visible, mask)
        logits = self._lm_head(self._model.norm(x[:, -1]))
        assert isinstance(logits, torch.Tensor)
        return logits

    @torch.inference_mode()
    def prefill(self, slot: int, tokens: list[int], start: int) -> torch.Tensor:
        """Write ``tokens`` at positions ``start..`` of ``slot``; logits after the last [V]."""
        device = self._keys.device
        ids = torch.tensor([tokens], device=device)
        positions = torch.arange(start, start + len(tokens), device=device).view(1, -1)
        return self._run(ids, positions, torch.tensor([slot], device=device))[0]

    @torch.inference_mode()
    def decode(self, slots: list[int], tokens: list[int], positions: list[int]) -> torch.Tensor:
        """One token per sequence, each at its own position in its slot; logits [B, V]."""
        device = self._keys.device
        return self._run(
            torch.tensor(tokens, device=device).view(-1, 1),
            torch.tensor(positions, device=device).view(-1, 1),
            torch.tensor(slots, device=device),
        )
