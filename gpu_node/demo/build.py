"""Build the demo models' artifacts and register them (``ferryman models demo``)."""

from __future__ import annotations

from pathlib import Path

from ferryman_server.gpu_node.demo import minilm, mlp, smollm2
from ferryman_server.registry.reader import RegistryReader
from ferryman_server.registry.states import ModelFormat
from ferryman_server.registry.writer import RegistryWriter, VersionSpec

MLP_MAX_BATCH = 128
MINILM_MAX_BATCH = 32
MINILM_PRICE_PER_1K_TOKENS_USD = 0.0001
MLP_PRICE_PER_ITEM_USD = 0.00001
SMOLLM2_PRICE_PER_1K_TOKENS_USD = 0.0002
GENERATIVE_NODE = "node-1"
"""Where ``ferryman up`` places the generative demo (its KV cache is preallocated: one node
holds it)."""


def build_demo_artifacts(models_dir: Path, generative: bool = False) -> list[VersionSpec]:
    """Build (or reuse) the demo artifacts under ``models_dir``; return their specs. With
    ``generative``, SmolLM2 too (its GGUF converted once: ~20 s the first time)."""
    # TorchScript, not torch.export: loading a .pt2 imports torch._dynamo and its serializer,
    # ~2 CPU-seconds and ~100 MiB of every node's start for a 4 MB model.
    mlp_path = models_dir / "mlp-1.pt"
    if not mlp_path.exists():
        # Write beside the target and rename, so a crash never leaves a half-written artifact.
        partial = mlp.script_mlp(mlp_path.with_name("mlp-1.partial.pt"))
        partial.rename(mlp_path)
    minilm_dir = minilm.build_artifact(models_dir / "minilm-1")
    specs = [
        VersionSpec(
            model="mlp",
            version="1",
            artifact=str(mlp_path),
            format=ModelFormat.TORCHSCRIPT,
            io_schema=mlp.SCHEMA,
            description="Demo MLP: float32 [512] -> [10], seeded weights",
            max_batch_size=MLP_MAX_BATCH,
            price_per_item_usd=MLP_PRICE_PER_ITEM_USD,
            cacheable=True,
            published=True,  # demo models serve every tenant; real ones start private
        ),
        VersionSpec(
            model="minilm",
            version="1",
            artifact=str(minilm_dir),
            format=ModelFormat.PYTHON,
            handler="ferryman_server.gpu_node.demo.minilm:MiniLMHandler",
            io_schema=minilm.SCHEMA,
            description="all-MiniLM-L6-v2 sentence embeddings: text -> 384 floats",
            max_batch_size=MINILM_MAX_BATCH,
            price_per_1k_tokens_usd=MINILM_PRICE_PER_1K_TOKENS_USD,
            cacheable=True,
            published=True,
        ),
    ]
    if generative:
        specs.append(
            VersionSpec(
                model="smollm2",
                version="1",
                artifact=str(smollm2.build_artifact(models_dir / "smollm2-1")),
                format=ModelFormat.CAUSAL_LM,
                io_schema=smollm2.SCHEMA,
                description="SmolLM2-135M-Instruct: chat and text generation (Inference.Generate)",
                max_batch_size=1,
                price_per_1k_tokens_usd=SMOLLM2_PRICE_PER_1K_TOKENS_USD,
                published=True,
            )
        )
    return specs


def register_demo(writer: RegistryWriter, reader: RegistryReader, specs: list[VersionSpec]) -> list[str]:
    """Register, route (100%) and place each demo version not yet known: on every node, the
    generative one on GENERATIVE_NODE."""
    added = []
    for spec in specs:
        if any(row.version == spec.version for row in reader.versions(spec.model)):
            continue
        writer.register_version(spec)
        writer.set_route(spec.model, {spec.version: 100})
        writer.place(
            spec.model, spec.version, GENERATIVE_NODE if spec.format == ModelFormat.CAUSAL_LM else "*"
        )
        added.append(f"{spec.model}:{spec.version}")
    return added
