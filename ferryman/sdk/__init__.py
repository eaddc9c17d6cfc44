"""The Ferryman Python SDK."""

from ferryman.sdk.client import AsyncClient, Client, Prediction, Timing, Usage
from ferryman.sdk.errors import (
    DeadlineExceeded,
    FerrymanError,
    InvalidInput,
    ModelError,
    NotFound,
    Overloaded,
    PermissionDenied,
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
    "Timing",
    "Unauthenticated",
    "Unavailable",
    "Usage",
]
