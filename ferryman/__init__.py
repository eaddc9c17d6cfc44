"""Ferryman: a gRPC-native, multi-tenant inference platform for PyTorch models.

Tenant apps use the SDK from here (``ferryman.Client``, ``ferryman.AsyncClient``);
every service imports the shared config, telemetry and gRPC helpers from here.
"""

__version__ = "0.1.0"

from ferryman.sdk import (
    AsyncClient,
    Client,
    DeadlineExceeded,
    FerrymanError,
    InvalidInput,
    ModelError,
    NotFound,
    Overloaded,
    PermissionDenied,
    Prediction,
    QuotaExceeded,
    Unauthenticated,
    Unavailable,
)

__all__ = [
    "AsyncClient",
    "Client",
    "DeadlineExceeded",
    "FerrymanError",
    "InvalidInput",
    "ModelError",
    "NotFound",
    "Overloaded",
    "PermissionDenied",
    "Prediction",
    "QuotaExceeded",
    "Unauthenticated",
    "Unavailable",
    "__version__",
]
