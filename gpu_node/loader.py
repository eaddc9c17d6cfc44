"""Load a version: find the artifact, check its sha256, load it, warm it up.

Runs in a worker thread. Any failure raises LoadError with the reason the node
reports for that version (FAILED), while it keeps serving the others.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
from pydantic import ValidationError

from ferryman.tensors import DTYPE_BY_NAME
from ferryman.v1 import node_pb2
from ferryman_server.gpu_node.batch import TORCH_BY_DTYPE, split_outputs
from ferryman_server.gpu_node.executor import predict_splitting
from ferryman_server.gpu_node.fetch import ArtifactCache, FetchError
from ferryman_server.gpu_node.handler import BatchInput
from ferryman_server.gpu_node.runtimes import Runtime, load_runtime
from ferryman_server.gpu_node.slots import LatencyProfile
from ferryman_server.kernel.artifacts import artifact_path, artifact_sha256
from ferryman_server.kernel.schema import IOSchema

WARMUP_TEXT = "Ferryman warms this model up before it serves."


class LoadError(RuntimeError):
    """Why a version could not be loaded; the node reports it and marks the version FAILED."""


class BaseNotServing(LoadError):
    """A LoRA adapter whose base version does not serve here (yet): its placement is tried
    again once the base serves (a remote adapter cannot be told from a model before it is
    fetched, so it may come first)."""

    def __init__(self, message: str, base: str) -> None:
        super().__init__(message)
        self.base = base


def resolve_device(name: str) -> torch.device:
    """``auto`` is the first CUDA device when there is one, else the CPU."""
    if name == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise LoadError(f"device {name} requested but CUDA is not available")
    return device


def parse_schema(spec: node_pb2.ModelVersionSpec) -> IOSchema:
    try:
        return IOSchema.from_proto(spec.schema)
    except ValidationError as exc:
        raise LoadError(f"invalid IO schema: {exc.errors()[0]['msg']}") from None


def locate(spec: node_pb2.ModelVersionSpec, cache: ArtifactCache | None = None) -> Path:
    """The artifact's local path, after checking it exists and its sha256 matches; a remote
    one (s3, http(s), pushed to the registry) through ``cache``, downloaded and checked."""
    path = artifact_path(spec.artifact_uri)
    if path is None:
        if cache is None:
            raise LoadError(f"artifact {spec.artifact_uri[:200]}: this node fetches no remote artifacts")
        try:
            return cache.local(spec.artifact_uri, spec.sha256)
        except FetchError as exc:
            raise LoadError(str(exc)) from None
    if not path.exists():
        raise LoadError(f"artifact {path} does not exist")
    actual = artifact_sha256(path)
    if spec.sha256 and actual != spec.sha256:
        raise LoadError(f"sha256 mismatch for {path}: expected {spec.sha256}, artifact is {actual}")
    return path


def warmup_sizes(max_batch_size: int) -> list[int]:
    """Powers of two up to the largest batch, and the largest batch itself."""
    sizes = []
    size = 1
    while size < max_batch_size:
        sizes.append(size)
        size *= 2
    return [*sizes, max_batch_size]


def example_inputs(schema: IOSchema, rows: int, device: torch.device) -> dict[str, BatchInput]:
    """A batch of ``rows`` synthetic items that fits the schema."""
    generator = torch.Generator().manual_seed(rows)
    inputs: dict[str, BatchInput] = {}
    for spec in schema.inputs:
        if spec.text:
            inputs[spec.name] = [WARMUP_TEXT] * rows
            continue
        shape = (rows, *(d if d > 0 else 1 for d in spec.shape))
        dtype = TORCH_BY_DTYPE[DTYPE_BY_NAME[spec.dtype]]
        if dtype.is_floating_point:
            inputs[spec.name] = torch.randn(shape, generator=generator).to(dtype)
        else:
            inputs[spec.name] = torch.zeros(shape, dtype=dtype)
    return inputs


def load_version(
    spec: node_pb2.ModelVersionSpec,
    device: torch.device,
    *,
    runs: int,
    smoothing: float,
    cache: ArtifactCache | None = None,
) -> tuple[Runtime, IOSchema, LatencyProfile]:
    """Load and warm up a version; return its runtime, schema and measured latency profile."""
    schema = parse_schema(spec)
    path = locate(spec, cache)
    try:
        runtime = load_runtime(spec.format, path, schema, spec.handler, device)
    except Exception as exc:
        raise LoadError(f"loading {path} as {spec.format} failed: {type(exc).__name__}: {exc}") from exc
    profile = LatencyProfile(smoothing=smoothing)
    for size in warmup_sizes(max(1, spec.max_batch_size)):
        inputs = example_inputs(schema, size, device)
        best = float("inf")
        for _ in range(runs):
            started = time.perf_counter()
            try_batch(runtime, schema, inputs, size)
            best = min(best, time.perf_counter() - started)
        profile.seconds[size] = best
    return runtime, schema, profile


def try_batch(runtime: Runtime, schema: IOSchema, inputs: dict[str, BatchInput], size: int) -> None:
    """Run a batch of ``size`` example items and split its outputs, as a request would."""
    try:
        result = predict_splitting(runtime, inputs, size, {})
        split_outputs(result.outputs, [size], schema)
    except Exception as exc:
        raise LoadError(f"warm-up at batch {size} failed: {type(exc).__name__}: {exc}") from exc


CHECKED_SIZES = (1, 2)
"""Batches a version is called at before it is registered: one row, and more than one (a
program exported with torch's default static batch of 1 fails only there)."""


def check_version(spec: node_pb2.ModelVersionSpec, cache: ArtifactCache | None = None) -> None:
    """What a node would do with ``spec``, done before it is registered: find and check the
    artifact (a remote one fetched through ``cache``, as a node fetches it), load it on the
    CPU and call it at a batch of 1 and of 2 (within its largest batch). Raises LoadError
    with the reason a node would give."""
    schema = parse_schema(spec)
    path = locate(spec, cache)
    device = torch.device("cpu")
    try:
        runtime = load_runtime(spec.format, path, schema, spec.handler, device)
    except Exception as exc:
        raise LoadError(f"loading {path} as {spec.format} failed: {type(exc).__name__}: {exc}") from exc
    for size in (s for s in CHECKED_SIZES if s <= max(1, spec.max_batch_size)):
        try_batch(runtime, schema, example_inputs(schema, size, device), size)
