"""Ferryman: a gRPC-native, multi-tenant inference platform for PyTorch models.

Tenant apps use the SDK from here (``ferryman.Client``, ``ferryman.AsyncClient``);
services build on its kernel (``ferryman.kernel``: settings, serving lifecycle, security,
telemetry); the CLI (``ferryman.cli``) composes them.
"""

__version__ = "0.1.0"

from ferryman.sdk import *  # noqa: F403  (the SDK is the package's public face)
from ferryman.sdk import __all__ as _sdk_names

__all__ = [*_sdk_names, "__version__"]
