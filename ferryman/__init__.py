"""Ferryman: a gRPC-native, multi-tenant inference platform for PyTorch models.

Tenant apps use the SDK from here (``ferryman.Client``, ``ferryman.AsyncClient``);
every service imports the shared config, telemetry and gRPC helpers from here.
"""

__version__ = "0.1.0"

from ferryman.sdk import *  # noqa: F403  (the SDK is the package's public face)
from ferryman.sdk import __all__ as _sdk_names

__all__ = [*_sdk_names, "__version__"]
