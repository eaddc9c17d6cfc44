"""A Llama forward over a preallocated KV cache of fixed slots, on a Llama checkpoint's
weights, in the precision the node asks for.

transformers' own caches grow per sequence and batch only sequences of one length; the
engine needs what vLLM's model runners do: every running sequence at its own position in
one decode forward, and prefill chunks written into a sequence's slot. Memory is fixed at
construction: the weights and ``slots`` x ``max_len`` positions per layer, nothing
allocated per step beyond activations.

A decode step of a small model on a CPU is spent in its GEMMs (over 80% of it, profiled in
docs/benchmarks.md), so the weights are held the way the step reads them: in ``dtype``
(float16 by default, which on a CPU is FBGEMM's packed fp16 GEMM: half the bytes of
float32, 1.5x bfloat16's speed at one sequence and twice float32's at eight), the query,
key and value projections as one matrix and the MLP's gate and up projections as another
(two matmuls where there were five), and the rotary tables computed once for every
position. The KV cache is held in ``dtype`` too; activations, norms, attention and logits
stay float32. bfloat16 is not the default: its 7 mantissa bits (float16 has 10) in the
activations or the cache turned SmolLM2's answer to "What is the capital of France?" into
French gibberish on a CPU, so it is offered for CUDA only by name (its tolerance is
measured by the device check, bench/gpu/check.py). torch's int8 and int4 weight-only
kernels are slower than any of these on AVX2, and FBGEMM's dynamic int8 agrees with float32
on too few tokens (the measurements are in docs/benchmarks.md). No float32 copy of the
checkpoint stays behind."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

from ferryman_server.gpu_node.generation import lora

PRECISIONS: dict[str, torch.dtype] = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
}
"""The precisions a node may hold a causal LM's weights and cache in
(``FERRYMAN_NODE_GENERATION_PRECISION``; bfloat16 is for CUDA)."""


@dataclass(frozen=True)
class CacheShape:
    layers: int
    slots: int
    kv_heads: int
    max_len: int
    head_dim: int
    item_bytes: int

    @property
    def bytes(self) -> int:
        """Keys and values of every layer and slot."""
        return 2 * self.layers * self.slots * self.kv_heads * self.max_len * self.head_dim * self.item_bytes


@dataclass(frozen=True)
class Layer:
    """One decoder layer's weights, as the forward reads them."""

    input_norm: torch.Tensor
    qkv: Projection
    """[(heads + 2 kv_heads) x head_dim, hidden]: q, k and v projections stacked."""
    out: Projection
    post_norm: torch.Tensor
    gate_up: Projection
    """[2 x intermediate, hidden]: the MLP's gate and up projections stacked."""
    down: Projection


def fbgemm_fp16() -> bool:
    """Whether this torch build has FBGEMM (x86 builds do; aarch64's have QNNPACK only)."""
    return "fbgemm" in torch.backends.quantized.supported_engines


class Projection:
    """``x @ weight.T`` for float32 ``x``, the weight held in ``dtype``, the result float32.

    float16 on a CPU is FBGEMM's packed fp16 GEMM: it reads half-precision weights and
    multiplies in float32, converting as it loads. A CPU without FBGEMM in its torch build
    holds float32 (a dense float16 GEMM there is many times slower); elsewhere (CUDA) a
    dense GEMM in ``dtype``."""

    def __init__(self, weight: torch.Tensor, dtype: torch.dtype, device: torch.device) -> None:
        self._packed: Any = None
        self._dense = torch.empty(0)
        if dtype == torch.float16 and device.type == "cpu" and not fbgemm_fp16():
            dtype = torch.float32
        if dtype == torch.float16 and device.type == "cpu":
            self._packed = torch.ops.quantized.linear_prepack_fp16(weight.float().contiguous(), None)
        else:
            self._dense = weight.to(device=device, dtype=dtype, copy=True).contiguous()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self._packed is not None:
            result: torch.Tensor = torch.ops.quantized.linear_dynamic_fp16(x, self._packed)
            return result
        if x.dtype == self._dense.dtype:
            return F.linear(x, self._dense)
        return F.linear(x.to(self._dense.dtype), self._dense).float()


def _zeros(size: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A zeroed cache. On the CPU from numpy's ``calloc``: its pages stay unmapped until a
    sequence writes them, so the cache is resident as far as it is used, not at its full
    reserved size (``torch.zeros`` writes every byte)."""
    if device.type != "cpu":
        return torch.zeros(size, dtype=dtype, device=device)
    return torch.from_numpy(np.zeros(size, dtype=torch.empty((), dtype=dtype).numpy().dtype))


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


LLAMA_DEFAULTS: dict[str, Any] = {
    "head_dim": None,
    "rms_norm_eps": 1e-6,
    "attention_bias": False,
    "mlp_bias": False,
}
"""What transformers' LlamaConfig assumes for the fields SlotLlama reads when config.json
leaves them out."""
DEFAULT_ROPE_THETA = 10_000.0


def llama_config(raw: dict[str, Any]) -> SimpleNamespace:
    """A Llama ``config.json`` as the attributes SlotLlama reads, without transformers
    (importing it costs a node about 2 s and 160 MB at start)."""
    values = {**LLAMA_DEFAULTS, **raw}
    values.setdefault("num_key_value_heads", values["num_attention_heads"])
    return SimpleNamespace(**values)


def rope_of(config: Any) -> dict[str, Any]:
    """A config's RoPE: ``rope_parameters`` (transformers 5), else ``rope_scaling`` and
    ``rope_theta`` (4.x)."""
    given = getattr(config, "rope_parameters", None)
    if given:
        return dict(given)
    scaling = dict(getattr(config, "rope_scaling", None) or {})
    scaling.setdefault("rope_type", scaling.pop("type", "default"))
    return {**scaling, "rope_theta": getattr(config, "rope_theta", DEFAULT_ROPE_THETA)}


def rotary_tables(config: Any, head_dim: int, max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of each position's rotary angles, [max_len, head_dim], as transformers'
    LlamaRotaryEmbedding computes them; a scaled RoPE (llama3, yarn, ...) is left to it."""
    rope = rope_of(config)
    if rope.get("rope_type", "default") != "default":
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

        scaled = config if isinstance(config, LlamaConfig) else LlamaConfig(**vars(config))
        cos, sin = LlamaRotaryEmbedding(scaled)(torch.empty(0), torch.arange(max_len).view(1, -1))
        return cos[0], sin[0]
    base = float(rope.get("rope_theta", DEFAULT_ROPE_THETA))
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    angles = torch.arange(max_len, dtype=torch.float32)[:, None] * inv_freq[None, :]
    both = torch.cat((angles, angles), dim=-1)
    return both.cos(), both.sin()


class SlotLlama:
    """``prefill`` one sequence's chunk, ``decode`` one token for many; both return the
    float32 logits of each sequence's last position."""

    def __init__(
        self,
        config: Any,
        weights: dict[str, torch.Tensor],
        slots: int,
        max_len: int,
        dtype: torch.dtype = torch.float16,
        device: torch.device | None = None,
    ) -> None:
        """``weights``: a ``LlamaForCausalLM`` state dict (``lm_head.weight`` may be absent
        when the embeddings are tied); each tensor is converted as it is taken."""
        if getattr(config, "attention_bias", False) or getattr(config, "mlp_bias", False):
            raise ValueError("Llama projections with biases are not supported")
        device = device or torch.device("cpu")
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.hidden = config.hidden_size
        self.head_dim = getattr(config, "head_dim", None) or self.hidden // self.heads
        self.eps = float(config.rms_norm_eps)
        self.scale = self.head_dim**-0.5

        # Copies, never views: a view of a memory-mapped checkpoint keeps the whole file
        # mapped (and resident) for as long as the model lives.
        def exact(name: str) -> torch.Tensor:
            return weights.pop(name).to(device=device, dtype=torch.float32, copy=True).contiguous()

        def stacked(*names: str) -> Projection:
            return Projection(torch.cat([weights.pop(name) for name in names]), dtype, device)

        prefix = "model.layers"
        self.layers = [
            Layer(
                input_norm=exact(f"{prefix}.{i}.input_layernorm.weight"),
                qkv=stacked(*(f"{prefix}.{i}.self_attn.{p}_proj.weight" for p in "qkv")),
                out=stacked(f"{prefix}.{i}.self_attn.o_proj.weight"),
                post_norm=exact(f"{prefix}.{i}.post_attention_layernorm.weight"),
                gate_up=stacked(f"{prefix}.{i}.mlp.gate_proj.weight", f"{prefix}.{i}.mlp.up_proj.weight"),
                down=stacked(f"{prefix}.{i}.mlp.down_proj.weight"),
            )
            for i in range(config.num_hidden_layers)
        ]
        embed = weights.pop("model.embed_tokens.weight")
        self.norm = exact("model.norm.weight")
        # Tied embeddings: the head multiplies by the embedding matrix.
        head = weights.pop("lm_head.weight") if "lm_head.weight" in weights else embed
        self.lm_head = Projection(head, dtype, device)
        self.embed = embed.to(device=device, dtype=dtype, copy=True)
        kv_width = self.kv_heads * self.head_dim
        self._split = [self.heads * self.head_dim, kv_width, kv_width]
        inter = config.intermediate_size
        self._widths = {
            "qkv": self._split,
            "out": [self.hidden],
            "gate_up": [inter, inter],
            "down": [self.hidden],
        }
        self.adapters: dict[int, lora.Adapter] = {}
        """LoRA adapters by id (0 is the base model itself)."""
        self._adapter_ids = itertools.count(1)
        self._device = device
        cos, sin = rotary_tables(config, self.head_dim, max_len)  # [max_len, head_dim]
        self._cos, self._sin = cos.to(device), sin.to(device)
        item_bytes = torch.empty((), dtype=dtype).element_size()
        self.shape = CacheShape(len(self.layers), slots, self.kv_heads, max_len, self.head_dim, item_bytes)
        size = (self.shape.layers, slots, self.kv_heads, max_len, self.head_dim)
        self._keys, self._values = _zeros(size, dtype, device), _zeros(size, dtype, device)

    @classmethod
    def of_model(cls, model: Any, slots: int, max_len: int, dtype: torch.dtype = torch.float16) -> SlotLlama:
        """On the weights of a transformers ``LlamaForCausalLM`` (the reference the tests
        and benchmarks compare with; every tensor is copied, so the reference may be dropped)."""
        return cls(model.config, dict(model.state_dict()), slots, max_len, dtype, model.lm_head.weight.device)

    @classmethod
    def from_checkpoint(
        cls,
        path: Path,
        weights_file: str,
        slots: int,
        max_len: int,
        dtype: torch.dtype = torch.float16,
        device: torch.device | None = None,
    ) -> SlotLlama:
        """From a directory holding ``config.json`` and safetensors weights, read one tensor
        at a time (the float32 file is never whole in memory beside its conversion)."""
        from safetensors import safe_open

        config = llama_config(json.loads((path / "config.json").read_text()))
        with safe_open(str(path / weights_file), framework="pt") as file:
            weights = _LazyWeights(file)
            return cls(config, weights, slots, max_len, dtype, device)  # type: ignore[arg-type]

    def _layer(
        self,
        index: int,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        rows: torch.Tensor,
        positions: torch.Tensor,
        slots: torch.Tensor,
        visible: int,
        mask: torch.Tensor | None,
        groups: list[tuple[int, torch.Tensor]],
    ) -> torch.Tensor:
        """One decoder layer for ``x`` [B, T, H] at ``positions`` [B, T] in ``slots`` [B];
        ``groups``: the rows of each LoRA adapter in the batch."""
        layer = self.layers[index]
        batch, steps, _ = x.shape

        def project(name: str, projection: Projection, h: torch.Tensor) -> torch.Tensor:
            y = projection(h)
            for adapter, rows in groups:
                factors = self.adapters[adapter].layers[index].get(name)
                if factors is not None:
                    a, b = factors
                    y = y.index_add(0, rows, (h[rows] @ a.T) @ b.T)
            return y

        h = F.rms_norm(x, (self.hidden,), layer.input_norm, self.eps)
        q, k, v = torch.split(project("qkv", layer.qkv, h), self._split, dim=-1)
        q = q.view(batch, steps, self.heads, self.head_dim).transpose(1, 2)
        k = k.view(batch, steps, self.kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(batch, steps, self.kv_heads, self.head_dim)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        keys, values = self._keys[index], self._values[index]
        # [B, T, kv, d] into each slot at its own positions.
        keys[rows, :, positions] = k.transpose(1, 2).to(keys.dtype)
        values[rows, :, positions] = v.to(values.dtype)
        out = F.scaled_dot_product_attention(
            q,
            keys[slots, :, :visible].float(),
            values[slots, :, :visible].float(),
            attn_mask=mask,
            scale=self.scale,
            enable_gqa=True,
        )
        x = x + project("out", layer.out, out.transpose(1, 2).reshape(batch, steps, -1))
        h = F.rms_norm(x, (self.hidden,), layer.post_norm, self.eps)
        gate, up = project("gate_up", layer.gate_up, h).chunk(2, -1)
        return x + project("down", layer.down, F.silu(gate) * up)

    def _run(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        slots: torch.Tensor,
        adapters: list[int],
        visible: int,
    ) -> torch.Tensor:
        """``visible``: the positions any query of the batch sees (its highest plus one),
        known on the host: reading it from ``positions`` would wait for the device."""
        batch, steps = tokens.shape
        # Rows by adapter (the base's need nothing): each group's delta in one product.
        groups = [
            (a, torch.tensor([i for i, row in enumerate(adapters) if row == a], device=tokens.device))
            for a in sorted(set(adapters) - {0})
        ]
        mask = None
        if batch > 1 or steps > 1:
            # A query sees the keys of its own slot up to its own position, nothing after.
            keys = torch.arange(visible, device=positions.device).view(1, 1, visible)
            seen = keys <= positions.unsqueeze(-1)
            mask = seen.unsqueeze(1)  # [B, 1, T, visible]: one mask for every head
        # [B, 1, T, d]: one rotation for every head.
        cos, sin = self._cos[positions].unsqueeze(1), self._sin[positions].unsqueeze(1)
        rows = slots.view(batch, 1).expand(batch, steps)
        x = F.embedding(tokens, self.embed).float()
        for index in range(self.shape.layers):
            x = self._layer(index, x, cos, sin, rows, positions, slots, visible, mask, groups)
        last = F.rms_norm(x[:, -1], (self.hidden,), self.norm, self.eps)
        return self.lm_head(last)

    def add_adapter(self, path: Path) -> int:
        """Load the LoRA adapter at ``path`` (``ferryman_server.gpu_node.generation.lora``); its id, for
        ``prefill`` and ``decode``. A ValueError if it does not fit this model."""
        adapter = lora.load(path, len(self.layers), self._widths, self._device)
        index = next(self._adapter_ids)
        self.adapters[index] = adapter
        return index

    def remove_adapter(self, index: int) -> None:
        self.adapters.pop(index, None)

    @torch.inference_mode()
    def prefill(self, slot: int, tokens: list[int], start: int, adapter: int = 0) -> torch.Tensor:
        """Write ``tokens`` at positions ``start..`` of ``slot``, under LoRA ``adapter`` (0:
        none); logits after the last [V]."""
        device = self._keys.device
        ids = torch.tensor([tokens], device=device)
        positions = torch.arange(start, start + len(tokens), device=device).view(1, -1)
        return self._run(ids, positions, torch.tensor([slot], device=device), [adapter], start + len(tokens))[
            0
        ]

    @torch.inference_mode()
    def decode(
        self, slots: list[int], tokens: list[int], positions: list[int], adapters: list[int] | None = None
    ) -> torch.Tensor:
        """One token per sequence, each at its own position in its slot and under its own
        LoRA adapter (0 or None: none); logits [B, V]."""
        device = self._keys.device
        return self._run(
            torch.tensor(tokens, device=device).view(-1, 1),
            torch.tensor(positions, device=device).view(-1, 1),
            torch.tensor(slots, device=device),
            adapters or [0] * len(slots),
            max(positions) + 1,
        )


class _LazyWeights:
    """A safetensors file as the ``pop``/``in`` mapping ``SlotLlama`` takes tensors from."""

    def __init__(self, file: Any) -> None:
        self._file = file
        self._names = set(file.keys())

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def pop(self, name: str) -> torch.Tensor:
        self._names.remove(name)
        tensor: torch.Tensor = self._file.get_tensor(name)
        return tensor
