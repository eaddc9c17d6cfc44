"""Pick the runtime for a version's format."""

from __future__ import annotations

from pathlib import Path

import torch

from ferryman_server.gpu_node.runtimes.base import Runtime
from ferryman_server.gpu_node.runtimes.python_handler import load_python
from ferryman_server.gpu_node.runtimes.torch_module import (
    load_torch_export,
    load_torchscript,
    warm_torch_export,
)
from ferryman_server.kernel.schema import IOSchema
from ferryman_server.registry.states import ModelFormat


def prepare_format(fmt: str) -> None:
    """Ready what loading format ``fmt`` needs, before a load is measured: the libraries and
    their first-use state are the process's, shared by every later load of the format, not
    the first version's."""
    if fmt == ModelFormat.TORCH_EXPORT:
        warm_torch_export()


def load_runtime(fmt: str, path: Path, schema: IOSchema, handler: str, device: torch.device) -> Runtime:
    """Load the artifact at ``path`` in format ``fmt`` onto ``device``."""
    inputs = [spec.name for spec in schema.inputs]
    outputs = [spec.name for spec in schema.outputs]
    if fmt == ModelFormat.TORCH_EXPORT:
        return load_torch_export(path, inputs, outputs, device)
    if fmt == ModelFormat.TORCHSCRIPT:
        return load_torchscript(path, inputs, outputs, device)
    if fmt == ModelFormat.PYTHON:
        return load_python(path, handler, device)
    raise ValueError(f"unknown model format {fmt!r}")
