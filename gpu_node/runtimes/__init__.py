"""Model runtimes: one class per artifact format, all behind ``Runtime``."""

from __future__ import annotations

from gpu_node.runtimes.base import Runtime, RuntimeOutput
from gpu_node.runtimes.factory import load_runtime

__all__ = ["Runtime", "RuntimeOutput", "load_runtime"]
