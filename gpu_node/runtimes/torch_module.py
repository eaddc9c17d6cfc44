"""Runtimes for ``torch_export`` (.pt2) programs and TorchScript modules."""

from __future__ import annotations

import functools
import io
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from ferryman_server.gpu_node.handler import BatchInput, RuntimeOutput


class TorchModuleRuntime:
    """Calls a module with the inputs in schema order; maps its outputs to schema names."""

    def __init__(
        self,
        module: Callable[..., Any],
        input_names: Sequence[str],
        output_names: Sequence[str],
        device: torch.device,
    ) -> None:
        self._module = module
        self._inputs = list(input_names)
        self._outputs = list(output_names)
        self._device = device

    def predict(self, inputs: Mapping[str, BatchInput], parameters: Mapping[str, str]) -> RuntimeOutput:
        args = []
        for name in self._inputs:
            value = inputs[name]
            if not isinstance(value, torch.Tensor):
                raise TypeError(f"input {name!r} of a torch module must be a tensor")
            args.append(value.to(self._device, non_blocking=True))
        with torch.inference_mode():
            result = self._module(*args)
        values = list(result) if isinstance(result, list | tuple) else [result]
        if len(values) != len(self._outputs):
            raise RuntimeError(f"model returned {len(values)} outputs, schema declares {len(self._outputs)}")
        return RuntimeOutput(outputs=dict(zip(self._outputs, values, strict=True)))


_EXPORT_LOAD = threading.Lock()


class _Warm(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


@functools.cache
def warm_torch_export() -> None:
    """Export, save, load and run a tiny program with a dynamic batch, once per process.

    A process's first ``torch.export`` load imports its loader (``torch._dynamo``, sympy for
    symbolic shapes) and fills the deserializer's caches: ~50 MB that stay the process's.
    Importing the loader alone left ~30 MB of first-use state to be charged to the first
    version measured (a 20 MB MLP was charged 52-72 MB); after this, it is charged its size."""
    saved = io.BytesIO()
    example = torch.zeros(2, 3)
    batch = torch.export.Dim("batch")
    torch.export.save(torch.export.export(_Warm(), (example,), dynamic_shapes=({0: batch},)), saved)
    saved.seek(0)
    with _EXPORT_LOAD:
        program = torch.export.load(saved)
    with torch.inference_mode():
        program.module()(example)


def load_torch_export(
    path: Path, input_names: Sequence[str], output_names: Sequence[str], device: torch.device
) -> TorchModuleRuntime:
    """Load a ``torch.export`` program saved with ``torch.export.save``."""
    # torch.export's deserializer is process-global state: two loads at once in one process
    # (nodes sharing a process) fail with "_CURRENT_DESERIALIZER is already set".
    with _EXPORT_LOAD:
        program = torch.export.load(str(path))
    module = program.module().to(device)
    return TorchModuleRuntime(module, input_names, output_names, device)


def load_torchscript(
    path: Path, input_names: Sequence[str], output_names: Sequence[str], device: torch.device
) -> TorchModuleRuntime:
    """Load a TorchScript module saved with ``torch.jit.save``."""
    module = torch.jit.load(str(path), map_location=device)  # type: ignore[no-untyped-call]
    module.eval()
    return TorchModuleRuntime(module, input_names, output_names, device)
