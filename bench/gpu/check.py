"""The device check: what a node does on a GPU, checked and measured in one run.

    python -m bench.gpu.check --out gpu-check.json   # full shapes on a GPU, tiny on a CPU (CI)

It needs torch (with CUDA for the real run), grpcio, protobuf, numpy, safetensors,
tokenizers, llguidance and prometheus-client besides the platform; nothing downloads. The
causal LM has SmolLM2-135M's shape with seeded random weights (its GGUF is too big to carry
to a bare GPU machine), so exactness is checked against references computed on the same
device, in float32. Correctness checks (each passes or fails, with its detail):

- the engine: batched greedy equal to solo; float16 and bfloat16 logits within the stated
  tolerance of float32 (teacher-forced); structured output that parses; seeded sampling
  that repeats; LoRA rows equal to the merged weights; prefix reuse exact; a sequence whose
  constraint fails ends alone, its neighbours as if alone;
- a node over gRPC on the device with the torch runtimes (TorchScript and torch.export MLPs,
  and a MiniLM-shaped encoder behind its Python handler): a batch's answers equal each item
  alone, memory accounted from the device.

Measures: tokens per second and time to first token at 1, 8, 32 and 64 streams, and the MLP's
rows per second by batch size with the device's utilisation. One JSON file holds it all; the
exit code is 1 when any check failed.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import math
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ferryman_server.gpu_node.generation import llama as slot_llama
from ferryman_server.gpu_node.generation import lora
from ferryman_server.gpu_node.generation.engine import GenerationEngine
from ferryman_server.gpu_node.generation.sampler import GREEDY, Sampling
from ferryman_server.gpu_node.generation.scheduler import (
    FinishReason,
    Scheduler,
    Sequence,
    TokenEvent,
    VirtualTokenCounter,
)

SMOLLM2: dict[str, Any] = {
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "vocab_size": 49152,
    "rms_norm_eps": 1e-5,
    "rope_theta": 100000.0,
    "max_position_embeddings": 8192,
}
"""SmolLM2-135M-Instruct's shape (its config.json)."""
TINY: dict[str, Any] = {**SMOLLM2, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2}
TINY.update(num_attention_heads=4, num_key_value_heads=2, vocab_size=512)
MINILM: dict[str, Any] = {
    "hidden_size": 384,
    "intermediate_size": 1536,
    "num_hidden_layers": 6,
    "num_attention_heads": 12,
    "vocab_size": 30522,
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "layer_norm_eps": 1e-12,
    "hidden_act": "gelu",
    "position_embedding_type": "absolute",
}
"""all-MiniLM-L6-v2's shape (the demo ``minilm``'s config.json)."""
TINY_MINILM = {**MINILM, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2}
TINY_MINILM.update(num_attention_heads=4, vocab_size=200)

TOLERANCE: dict[str, tuple[float, float]] = {"float16": (0.985, 1e-4), "bfloat16": (0.95, 1e-3)}
"""precision -> (top-1 agreement at least, mean KL in nats at most) against float32,
teacher-forced on float32's greedy tokens. float16 is what a node runs; bfloat16 has 3
fewer mantissa bits (it garbled SmolLM2's answers on a CPU: docs/benchmarks.md)."""
MAX_LEN = 256
LORA_RANK, LORA_ALPHA = 8, 16


@dataclass
class Shapes:
    llm: dict[str, Any]
    minilm: dict[str, Any]
    prompt: int
    answer: int
    streams: tuple[int, ...]
    mlp_batches: tuple[int, ...]


FULL = Shapes(SMOLLM2, MINILM, prompt=64, answer=64, streams=(1, 8, 32, 64), mlp_batches=(1, 8, 32, 128, 512))
SMALL = Shapes(TINY, TINY_MINILM, prompt=12, answer=8, streams=(1, 4), mlp_batches=(1, 8))


@dataclass
class Check:
    name: str
    passed: bool
    seconds: float
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class Report:
    device: str
    torch: str
    gpu: str
    tiny: bool
    checks: list[Check] = field(default_factory=list)
    measures: dict[str, Any] = field(default_factory=dict)

    def run(self, name: str, check: Callable[[], dict[str, Any]]) -> None:
        """Run one check; an exception fails it with its traceback's last lines."""
        started = time.perf_counter()
        try:
            detail = check()
            passed = bool(detail.pop("passed"))
        except Exception as exc:
            passed, detail = (
                False,
                {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-2000:]},
            )
        self.checks.append(Check(name, passed, round(time.perf_counter() - started, 3), detail))
        print(f"{'PASS' if passed else 'FAIL'} {name} ({self.checks[-1].seconds:.1f} s) {detail}", flush=True)


# -- the causal LM -------------------------------------------------------------------------


def random_llama(config: dict[str, Any], seed: int = 0) -> dict[str, torch.Tensor]:
    """A Llama state dict of ``config``'s shape (tied embeddings), seeded: embeddings N(0, 1)
    and projections N(0, 1/fan_in), so the logits are peaked as a trained model's are."""
    g = torch.Generator().manual_seed(seed)
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    head_dim = hidden // config["num_attention_heads"]
    kv = config["num_key_value_heads"] * head_dim

    def proj(out: int, inp: int) -> torch.Tensor:
        return torch.randn(out, inp, generator=g) / math.sqrt(inp)

    weights = {"model.embed_tokens.weight": torch.randn(config["vocab_size"], hidden, generator=g)}
    weights["model.norm.weight"] = torch.ones(hidden)
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}"
        weights |= {
            f"{p}.input_layernorm.weight": torch.ones(hidden),
            f"{p}.post_attention_layernorm.weight": torch.ones(hidden),
            f"{p}.self_attn.q_proj.weight": proj(hidden, hidden),
            f"{p}.self_attn.k_proj.weight": proj(kv, hidden),
            f"{p}.self_attn.v_proj.weight": proj(kv, hidden),
            f"{p}.self_attn.o_proj.weight": proj(hidden, hidden),
            f"{p}.mlp.gate_proj.weight": proj(inter, hidden),
            f"{p}.mlp.up_proj.weight": proj(inter, hidden),
            f"{p}.mlp.down_proj.weight": proj(hidden, inter),
        }
    return weights


def model(
    config: dict[str, Any], device: torch.device, dtype: torch.dtype = torch.float32, slots: int = 8
) -> slot_llama.SlotLlama:
    return slot_llama.SlotLlama(
        slot_llama.llama_config(config), random_llama(config), slots, MAX_LEN, dtype, device
    )


def engine(lm: slot_llama.SlotLlama, slots: int = 8, prefix_cache: bool = False) -> GenerationEngine:
    return GenerationEngine(
        lm, Scheduler(slots, 4 * MAX_LEN, VirtualTokenCounter(), prefix_cache=prefix_cache), MAX_LEN, ()
    )


def prompts(shapes: Shapes, count: int, seed: int = 1) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    vocab = shapes.llm["vocab_size"]
    return [torch.randint(0, vocab, (shapes.prompt,), generator=g).tolist() for _ in range(count)]


def run(e: GenerationEngine) -> list[TokenEvent]:
    events: list[TokenEvent] = []
    while not e.idle:
        events += e.step()
    return events


def tokens_by_sequence(events: list[TokenEvent]) -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for event in events:
        found.setdefault(event.seq_id, [])
        if event.token is not None:
            found[event.seq_id].append(event.token)
    return found


def greedy(lm: slot_llama.SlotLlama, batch: list[list[int]], answer: int) -> dict[str, list[int]]:
    e = engine(lm)
    for i, prompt in enumerate(batch):
        e.submit(Sequence(str(i), "t", prompt, answer))
    return tokens_by_sequence(run(e))


def check_batched_equals_solo(device: torch.device, shapes: Shapes) -> dict[str, Any]:
    lm = model(shapes.llm, device)
    batch = prompts(shapes, 6)
    together = greedy(lm, batch, shapes.answer)
    alone = {str(i): greedy(lm, [p], shapes.answer)["0"] for i, p in enumerate(batch)}
    return {"passed": together == alone, "sequences": len(batch), "tokens": sum(map(len, together.values()))}


def teacher_forced(lm: slot_llama.SlotLlama, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    rows = [lm.prefill(0, prompt, 0)]
    for i, token in enumerate(tokens[:-1]):
        rows.append(lm.decode([0], [token], [len(prompt) + i])[0])
    return torch.stack(rows).float()


def check_precisions(device: torch.device, shapes: Shapes) -> dict[str, Any]:
    exact = model(shapes.llm, device)
    batch = prompts(shapes, 4)
    reference = greedy(exact, batch, shapes.answer)
    detail: dict[str, Any] = {"passed": True}
    kinds = ["float16", "bfloat16"] if device.type == "cuda" else ["float16"]
    for kind in kinds:
        low = model(shapes.llm, device, getattr(torch, kind))
        agree, kl, positions = 0, 0.0, 0
        for i, prompt in enumerate(batch):
            tokens = reference[str(i)]
            want = teacher_forced(exact, prompt, tokens).log_softmax(-1)
            got = teacher_forced(low, prompt, tokens).log_softmax(-1)
            agree += int((got.argmax(-1) == want.argmax(-1)).sum())
            kl += float((want.exp() * (want - got)).sum(-1).sum())
            positions += len(tokens)
        top1, mean_kl = agree / positions, kl / positions
        least, most = TOLERANCE[kind]
        ok = top1 >= least and mean_kl <= most
        detail[kind] = {"top1": round(top1, 4), "mean_kl": mean_kl, "positions": positions, "passed": ok}
        detail["passed"] = detail["passed"] and ok
    return detail


def byte_tokenizer(directory: Path, vocab: int) -> Path:
    """A byte-level BPE tokenizer of at most ``vocab`` tokens, trained here on a few lines of
    JSON (nothing downloads); its tokenizer.json."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = ['{"colour": "red", "size": 3}', '{"answer": "yes"}', '{"a": [1, 2, 3], "b": null}'] * 50
    tokenizer.train_from_iterator(corpus, trainer)
    path = directory / "tokenizer.json"
    tokenizer.save(str(path))
    return path


def check_structured(device: torch.device, shapes: Shapes) -> dict[str, Any]:
    import llguidance
    from tokenizers import Tokenizer

    from ferryman_server.gpu_node.generation.structured import LAYOUT, JsonConstraint

    schema = {
        "type": "object",
        "properties": {"colour": {"enum": ["red", "green", "blue"]}, "size": {"enum": [1, 2, 3]}},
        "required": ["colour", "size"],
        "additionalProperties": False,
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = byte_tokenizer(Path(tmp), min(400, shapes.llm["vocab_size"]))
        text_tokenizer = Tokenizer.from_file(str(path))
        tokenizer = llguidance.LLTokenizer(
            path.read_text(), eos_token=text_tokenizer.token_to_id("<|endoftext|>")
        )
    grammar = llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema), defaults=LAYOUT)
    lm = model(shapes.llm, device)
    e = engine(lm)
    for i, sampling in enumerate((GREEDY, Sampling(temperature=1.0, seed=3))):
        constraint = JsonConstraint(llguidance.LLMatcher(tokenizer, grammar, log_level=0))
        e.submit(Sequence(str(i), "t", prompts(shapes, 1, seed=i)[0], 48), sampling, constraint)
    events = run(e)
    texts = {sid: text_tokenizer.decode(tokens) for sid, tokens in tokens_by_sequence(events).items()}
    finishes = {ev.seq_id: ev.finish for ev in events if ev.finish is not None}
    parsed = {sid: json.loads(text) for sid, text in texts.items()}
    ok = all(set(p) == {"colour", "size"} for p in parsed.values())
    return {"passed": ok and set(finishes.values()) == {FinishReason.STOP}, "texts": texts}


def check_seeded(device: torch.device, shapes: Shapes) -> dict[str, Any]:
    lm = model(shapes.llm, device)
    runs = []
    for _ in range(2):
        e = engine(lm)
        for i, prompt in enumerate(prompts(shapes, 3)):
            e.submit(
                Sequence(str(i), "t", prompt, shapes.answer), Sampling(temperature=0.8, top_p=0.9, seed=i)
            )
        runs.append(tokens_by_sequence(run(e)))
    return {"passed": runs[0] == runs[1], "tokens": sum(map(len, runs[0].values()))}


def write_adapter(path: Path, config: dict[str, Any], seed: int) -> dict[str, torch.Tensor]:
    """A PEFT-format adapter with seeded factors on q, v, o, gate and down; its weights."""
    g = torch.Generator().manual_seed(seed)
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    kv = config["num_key_value_heads"] * (hidden // config["num_attention_heads"])
    shapes = {"self_attn.q_proj": (hidden, hidden), "self_attn.v_proj": (kv, hidden)}
    shapes |= {"self_attn.o_proj": (hidden, hidden), "mlp.gate_proj": (inter, hidden)}
    shapes["mlp.down_proj"] = (hidden, inter)
    weights: dict[str, torch.Tensor] = {}
    for i in range(config["num_hidden_layers"]):
        for target, (out, inp) in shapes.items():
            stem = f"base_model.model.model.layers.{i}.{target}"
            weights[f"{stem}.lora_A.weight"] = torch.randn(LORA_RANK, inp, generator=g) * 0.05
            weights[f"{stem}.lora_B.weight"] = torch.randn(out, LORA_RANK, generator=g) * 0.05
    from safetensors.torch import save_file

    path.mkdir(parents=True)
    targets = [t.split(".")[-1] for t in shapes]
    (path / lora.CONFIG).write_text(
        json.dumps({"r": LORA_RANK, "lora_alpha": LORA_ALPHA, "target_modules": targets})
    )
    save_file(weights, str(path / lora.WEIGHTS))
    return weights


def merged(config: dict[str, Any], adapter: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The base weights with the adapter folded in: W + (alpha / r) B A."""
    weights = random_llama(config)
    for name in [n for n in adapter if n.endswith("lora_A.weight")]:
        target = name.removeprefix("base_model.model.").removesuffix(".lora_A.weight") + ".weight"
        b = adapter[name.replace("lora_A", "lora_B")]
        weights[target] = weights[target] + (LORA_ALPHA / LORA_RANK) * b @ adapter[name]
    return weights


def check_lora(device: torch.device, shapes: Shapes) -> dict[str, Any]:
    config = shapes.llm
    with tempfile.TemporaryDirectory() as tmp:
        factors = write_adapter(Path(tmp) / "adapter", config, seed=7)
        lm = model(config, device)
        adapter = lm.add_adapter(Path(tmp) / "adapter")
    folded = slot_llama.SlotLlama(
        slot_llama.llama_config(config), merged(config, factors), 8, MAX_LEN, torch.float32, device
    )
    batch = prompts(shapes, 3)
    worst = 0.0
    for i, prompt in enumerate(batch):
        # Row 0 under the adapter, row 1 the base, in one prefill each and one decode.
        with_adapter = lm.prefill(2 * i, prompt, 0, adapter)
        lm.prefill(2 * i + 1, prompt, 0)
        folded_logits = folded.prefill(i, prompt, 0)
        worst = max(worst, float((with_adapter - folded_logits).abs().max()))
        token = int(folded_logits.argmax())
        rows = lm.decode([2 * i, 2 * i + 1], [token, token], [len(prompt)] * 2, [adapter, 0])
        alone = folded.decode([i], [token], [len(prompt)])[0]
        worst = max(worst, float((rows[0] - alone).abs().max()))
    scale = float(folded_logits.abs().max())
    return {"passed": worst <= 1e-3 * max(1.0, scale), "max_abs_diff": worst, "logit_scale": scale}


def check_prefix_reuse(device: torch.device, shapes: Shapes) -> dict[str, Any]:
    shared = prompts(shapes, 1, seed=5)[0] * 2
    first, second = shared + prompts(shapes, 1, seed=6)[0], shared + prompts(shapes, 1, seed=7)[0]
    cached = engine(model(shapes.llm, device), prefix_cache=True)
    cached.submit(Sequence("a", "t", first, shapes.answer))
    run(cached)
    cached.submit(Sequence("b", "t", second, shapes.answer))
    reused = tokens_by_sequence(run(cached))["b"]
    fresh = greedy(model(shapes.llm, device), [second], shapes.answer)["0"]
    hits = cached.scheduler.prefix.hits
    return {
        "passed": reused == fresh and hits >= 1,
        "prefix_hits": hits,
        "tokens_reused": cached.scheduler.prefix.reused_tokens,
    }


class RaisingConstraint:
    """Allows everything for two steps, then fails."""

    def __init__(self) -> None:
        self.calls = 0

    def allowed(self, vocab: int) -> torch.Tensor:
        self.calls += 1
        if self.calls > 2:
            raise RuntimeError("grammar failed")
        return torch.ones(vocab, dtype=torch.bool)

    def consume(self, token: int) -> None:
        pass

    @property
    def finished(self) -> FinishReason | None:
        return None


def check_isolation(device: torch.device, shapes: Shapes) -> dict[str, Any]:
    lm = model(shapes.llm, device)
    batch = prompts(shapes, 4)
    e = engine(lm)
    for i, prompt in enumerate(batch[:3]):
        e.submit(Sequence(str(i), "t", prompt, shapes.answer))
    e.submit(Sequence("bad", "t", batch[3], shapes.answer), constraint=RaisingConstraint())
    events = run(e)
    together = tokens_by_sequence(events)
    alone = {str(i): greedy(lm, [p], shapes.answer)["0"] for i, p in enumerate(batch[:3])}
    finishes = {ev.seq_id: ev.finish for ev in events if ev.finish is not None}
    healthy = {k: v for k, v in together.items() if k != "bad"}
    return {
        "passed": healthy == alone and finishes["bad"] == FinishReason.ERROR,
        "bad_tokens": len(together["bad"]),
    }


# -- a node over gRPC --------------------------------------------------------------------------


def minilm_artifact(directory: Path, config: dict[str, Any]) -> Path:
    """A MiniLM-shaped encoder for the demo's Python handler: seeded weights of ``config``'s
    shape, a WordPiece tokenizer trained here, and the handler's own config files."""
    from safetensors.torch import save_file
    from tokenizers import BertWordPieceTokenizer

    g = torch.Generator().manual_seed(11)
    hidden, inter = config["hidden_size"], config["intermediate_size"]

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * 0.05

    w = {
        "embeddings.word_embeddings.weight": randn(config["vocab_size"], hidden),
        "embeddings.position_embeddings.weight": randn(config["max_position_embeddings"], hidden),
        "embeddings.token_type_embeddings.weight": randn(config["type_vocab_size"], hidden),
        "embeddings.LayerNorm.weight": torch.ones(hidden),
        "embeddings.LayerNorm.bias": torch.zeros(hidden),
    }
    dense = {"attention.self.query": (hidden, hidden), "attention.self.key": (hidden, hidden)}
    dense |= {"attention.self.value": (hidden, hidden), "attention.output.dense": (hidden, hidden)}
    dense |= {"intermediate.dense": (inter, hidden), "output.dense": (hidden, inter)}
    for i in range(config["num_hidden_layers"]):
        for name, (out, inp) in dense.items():
            w[f"encoder.layer.{i}.{name}.weight"] = randn(out, inp)
            w[f"encoder.layer.{i}.{name}.bias"] = randn(out)
        for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
            w[f"encoder.layer.{i}.{norm}.weight"] = torch.ones(hidden)
            w[f"encoder.layer.{i}.{norm}.bias"] = torch.zeros(hidden)
    directory.mkdir(parents=True)
    save_file(w, str(directory / "model.safetensors"))
    (directory / "config.json").write_text(json.dumps(config))
    (directory / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128}))
    words = directory / "corpus.txt"
    words.write_text("the quick brown fox jumps over the lazy dog\nferryman carries models across\n" * 20)
    tokenizer = BertWordPieceTokenizer(lowercase=True)
    tokenizer.train([str(words)], vocab_size=min(config["vocab_size"], 200), show_progress=False)
    tokenizer.save(str(directory / "tokenizer.json"))
    return directory


@contextmanager
def node_server(device: torch.device, data: Path) -> Iterator[str]:
    """A node serving on ``device`` in this process (its own event loop in a thread)."""
    from ferryman_server.gpu_node.server import serve_node
    from ferryman_server.gpu_node.settings import NodeSettings
    from ferryman_server.kernel.config import CommonSettings

    settings = NodeSettings(
        listen="127.0.0.1:0", name="gpu-check", device=device.type, use_registry=False, warmup_runs=1
    )
    common = CommonSettings(data_dir=data)
    ready = threading.Event()
    state: dict[str, Any] = {}

    def serve() -> None:
        async def main() -> None:
            state["loop"], state["stop"] = asyncio.get_running_loop(), asyncio.Event()

            def on_ready(address: str) -> None:
                state["address"] = address
                ready.set()

            await serve_node(settings, common, state["stop"], on_ready)

        try:
            asyncio.run(main())
        finally:
            ready.set()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    if not ready.wait(300) or "address" not in state:
        raise RuntimeError("the node did not start")
    try:
        yield str(state["address"])
    finally:
        state["loop"].call_soon_threadsafe(state["stop"].set)
        thread.join(120)


def check_node(device: torch.device, shapes: Shapes) -> dict[str, Any]:
    import grpc

    from ferryman.tensors import decode, encode
    from ferryman.v1 import common_pb2, node_pb2, node_pb2_grpc
    from ferryman_server.gpu_node.demo import minilm, mlp
    from ferryman_server.kernel.artifacts import artifact_sha256
    from ferryman_server.kernel.schema import IOSchema
    from ferryman_server.kernel.security import TOKEN_HEADER

    metadata = ((TOKEN_HEADER, os.environ["FERRYMAN_SERVICE_TOKEN"]),)
    detail: dict[str, Any] = {"passed": True}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        versions = {
            "mlp-script": (mlp.script_mlp(root / "mlp.pt"), "torchscript", mlp.SCHEMA, ""),
            "mlp-export": (mlp.export_mlp(root / "mlp.pt2"), "torch_export", mlp.SCHEMA, ""),
            "minilm": (
                minilm_artifact(root / "minilm", shapes.minilm),
                "python",
                {
                    **minilm.SCHEMA,
                    "outputs": [
                        {"name": "embedding", "dtype": "FP32", "shape": [shapes.minilm["hidden_size"]]}
                    ],
                },
                "ferryman_server.gpu_node.demo.minilm:MiniLMHandler",
            ),
        }
        g = torch.Generator().manual_seed(2)
        texts = ["the quick brown fox", "ferryman carries", "lazy dog", "models across the river", "fox"]
        with node_server(device, root / "data") as address, grpc.insecure_channel(address) as channel:
            stub = node_pb2_grpc.NodeStub(channel)
            for version, (path, fmt, schema, handler) in versions.items():
                spec = node_pb2.ModelVersionSpec(
                    model="check",
                    version=version,
                    artifact_uri=str(path),
                    sha256=artifact_sha256(path),
                    format=fmt,
                    handler=handler,
                    schema=IOSchema.model_validate(schema).to_proto(),
                    max_batch_size=64,
                )
                loaded = stub.LoadModel(node_pb2.LoadModelRequest(spec=spec), metadata=metadata, timeout=300)
                if loaded.state != node_pb2.VERSION_STATE_SERVING:
                    detail[version] = {"passed": False, "reason": loaded.reason}
                    detail["passed"] = False
                    continue
                if version == "minilm":
                    items = [
                        node_pb2.BatchItem(
                            request_id=str(i),
                            inputs=[
                                common_pb2.NamedTensor(name="text", text=common_pb2.TextList(values=[t]))
                            ],
                        )
                        for i, t in enumerate(texts)
                    ]
                else:
                    items = [
                        node_pb2.BatchItem(
                            request_id=str(i),
                            inputs=[
                                common_pb2.NamedTensor(
                                    name="input",
                                    tensor=encode(torch.randn(1, mlp.IN_FEATURES, generator=g).numpy()),
                                )
                            ],
                        )
                        for i in range(5)
                    ]

                def infer(batch: list[Any], version: str = version) -> list[np.ndarray[Any, Any]]:
                    request = node_pb2.InferBatchRequest(model="check", version=version, items=batch)
                    answer = stub.InferBatch(request, metadata=metadata, timeout=120)
                    return [decode(item.outputs[0].tensor) for item in answer.items]

                together = infer(items)
                alone = [infer([item])[0] for item in items]
                diff = max(float(np.abs(a - b).max()) for a, b in zip(together, alone, strict=True))
                ok = diff <= 1e-4
                detail[version] = {"passed": ok, "max_abs_diff": diff}
                detail["passed"] = detail["passed"] and ok
            info = stub.NodeInfo(node_pb2.NodeInfoRequest(), metadata=metadata, timeout=30)
            held = {v.version: v.memory_bytes for v in info.versions}
            detail["device"], detail["memory_bytes"] = info.device, held
            accounted = all(b > 0 for b in held.values()) and info.device.startswith(device.type)
            detail["passed"] = detail["passed"] and accounted and len(held) == len(versions)
    return detail


# -- measures ------------------------------------------------------------------------------


def measure_streams(device: torch.device, shapes: Shapes) -> dict[str, Any]:
    """Tokens per second and time to first token with N streams at once (float16, as a node
    runs; greedy, each stream ``answer`` tokens after a ``prompt``-token prompt)."""
    slots = max(shapes.streams)
    lm = model(shapes.llm, device, torch.float16, slots=slots)
    results: dict[str, Any] = {}
    for streams in shapes.streams:
        e = engine(lm, slots=slots)
        batch = prompts(shapes, streams, seed=streams)
        sync(device)
        started = time.perf_counter()
        for i, prompt in enumerate(batch):
            e.submit(Sequence(str(i), "t", prompt, shapes.answer))
        first: dict[str, float] = {}
        tokens = 0
        while not e.idle:
            for event in e.step():
                if event.token is not None:
                    tokens += 1
                    first.setdefault(event.seq_id, time.perf_counter() - started)
        sync(device)
        elapsed = time.perf_counter() - started
        results[str(streams)] = {
            "tokens_per_s": round(tokens / elapsed, 1),
            "ttft_p50_s": round(statistics.median(first.values()), 4),
            "tokens": tokens,
        }
    return results


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Utilisation:
    """The device's utilisation (nvidia-smi's percent) sampled every 100 ms meanwhile."""

    def __init__(self, device: torch.device) -> None:
        self._on = device.type == "cuda" and shutil.which("nvidia-smi") is not None
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.1):
            done = subprocess.run(
                ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits", "-i", "0"],
                capture_output=True,
                text=True,
                timeout=5,
                check=False,
            )
            if done.returncode == 0 and done.stdout.strip().isdigit():
                self.samples.append(int(done.stdout.strip()))

    def __enter__(self) -> Utilisation:
        if self._on:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._on:
            self._thread.join(10)

    @property
    def mean(self) -> float | None:
        return round(statistics.fmean(self.samples), 1) if self.samples else None


def measure_mlp(device: torch.device, shapes: Shapes) -> dict[str, Any]:
    """The demo MLP (TorchScript) on the device: rows per second by batch size, with the
    device's mean utilisation while each size runs (for ~1 s, or 3 batches at least)."""
    from ferryman_server.gpu_node.demo import mlp

    with tempfile.TemporaryDirectory() as tmp:
        loaded: torch.jit.ScriptModule = torch.jit.load(  # type: ignore[no-untyped-call]
            str(mlp.script_mlp(Path(tmp) / "mlp.pt")), map_location=device
        )
        module = loaded.eval()
    results: dict[str, Any] = {}
    with torch.inference_mode():
        for size in shapes.mlp_batches:
            x = torch.randn(size, mlp.IN_FEATURES, device=device)
            module(x)
            sync(device)
            with Utilisation(device) as use:
                started, batches = time.perf_counter(), 0
                while batches < 3 or time.perf_counter() - started < 1.0:
                    module(x)
                    batches += 1
                sync(device)
                elapsed = time.perf_counter() - started
            results[str(size)] = {"rows_per_s": round(size * batches / elapsed), "utilisation_pct": use.mean}
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--shapes", choices=["full", "tiny"], help="default: full on a GPU, tiny on a CPU (CI)"
    )
    parser.add_argument("--out", type=Path, default=Path("gpu-check.json"))
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    tiny = (args.shapes or ("full" if device.type == "cuda" else "tiny")) == "tiny"
    shapes = SMALL if tiny else FULL
    os.environ.setdefault("FERRYMAN_SERVICE_TOKEN", secrets.token_urlsafe(24))
    os.environ.setdefault("FERRYMAN_LOG_LEVEL", "WARNING")
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else ""
    report = Report(str(device), torch.__version__, gpu, tiny)
    torch.manual_seed(0)
    checks: dict[str, Callable[[torch.device, Shapes], dict[str, Any]]] = {
        "engine: batched greedy equals solo": check_batched_equals_solo,
        "engine: low precisions within tolerance of float32": check_precisions,
        "engine: structured output parses": check_structured,
        "engine: seeded sampling repeats": check_seeded,
        "engine: LoRA rows equal the merged weights": check_lora,
        "engine: prefix reuse is exact": check_prefix_reuse,
        "engine: a failing sequence ends alone": check_isolation,
        "node: batched answers equal solo, memory from the device": check_node,
    }
    for name, check in checks.items():
        report.run(name, functools.partial(check, device, shapes))
    for name, measure in (("streams", measure_streams), ("mlp", measure_mlp)):
        started = time.perf_counter()
        report.measures[name] = measure(device, shapes)
        print(f"measured {name} ({time.perf_counter() - started:.1f} s): {report.measures[name]}", flush=True)
    args.out.write_text(json.dumps(asdict(report), indent=2, default=str))
    failed = [c.name for c in report.checks if not c.passed]
    print(f"{len(report.checks) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
