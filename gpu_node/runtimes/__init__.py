"""Model runtimes: one class per artifact format, all behind ``Runtime``."""

from __future__ import annotations

from ferryman_server.gpu_node.handler import RuntimeOutput
from ferryman_server.gpu_node.runtimes.base import Runtime
from ferryman_server.gpu_node.runtimes.factory import load_runtime

__all__ = ["Runtime", "RuntimeOutput", "load_runtime"]
