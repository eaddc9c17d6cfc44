"""Runtimes for ``torch_export`` (.pt2) programs and TorchScript modules."""

from __future__ import annotations

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
