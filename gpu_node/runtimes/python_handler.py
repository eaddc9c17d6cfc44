"""Runtime for ``python`` artifacts: a handler class named ``module:Class``.

A handler is for models that need pre/post-processing (tokenizers, pooling):

    class MyHandler:
        def load(self, path: Path, device: torch.device) -> None: ...
        def predict(self, inputs, parameters) -> RuntimeOutput: ...

``inputs`` maps each schema input to a batch tensor or a list of strings.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from gpu_node.runtimes.base import BatchInput, RuntimeOutput


class PythonRuntime:
    """Wraps a loaded handler instance."""

    def __init__(self, handler: Any) -> None:
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
    handler = handler_class()
    handler.load(path, device)
    return PythonRuntime(handler)
