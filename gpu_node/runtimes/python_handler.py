"""Runtime for ``python`` artifacts: a handler class named ``module:Class``, written to the
handler API (``ferryman_server.gpu_node.handler``)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path

import torch

from ferryman_server.gpu_node.handler import BatchInput, Handler, RuntimeOutput


class PythonRuntime:
    """Wraps a loaded handler instance."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler

    def predict(self, inputs: Mapping[str, BatchInput], parameters: Mapping[str, str]) -> RuntimeOutput:
        result = self._handler.predict(inputs, parameters)
        if isinstance(result, RuntimeOutput):
            return result
        if isinstance(result, Mapping):
            return RuntimeOutput(outputs=dict(result))
        raise TypeError(f"handler returned {type(result).__name__}, expected RuntimeOutput or a mapping")


def load_python(path: Path, handler_ref: str, device: torch.device) -> PythonRuntime:
    """Import ``module:Class``, instantiate it and call its ``load``."""
    module_name, _, class_name = handler_ref.partition(":")
    if not module_name or not class_name:
        raise ValueError(f"handler must be module:Class, got {handler_ref!r}")
    handler_class = getattr(importlib.import_module(module_name), class_name)
    handler: Handler = handler_class()
    handler.load(path, device)
    return PythonRuntime(handler)
