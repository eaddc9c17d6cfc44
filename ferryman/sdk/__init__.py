"""The Ferryman Python SDK."""

from ferryman.sdk.aio import AsyncClient
from ferryman.sdk.client import Client
from ferryman.sdk.errors import (
    AcceptedAsJob,
    ClientClosed,
    DeadlineExceeded,
    FerrymanError,
    InvalidInput,
    InvalidOption,
    ModelError,
    NotFound,
    Overloaded,
    PermissionDenied,
    QuotaExceeded,
    RequestIdReused,
    Unauthenticated,
    Unavailable,
)
from ferryman.sdk.generation import Chunk
from ferryman.sdk.prediction import Prediction, Timing, Usage

__all__ = [
    "AcceptedAsJob",
    "AsyncClient",
    "Chunk",
    "Client",
    "ClientClosed",
    "DeadlineExceeded",
    "FerrymanError",
    "InvalidInput",
    "InvalidOption",
    "ModelError",
    "NotFound",
    "Overloaded",
    "PermissionDenied",
    "Prediction",
    "QuotaExceeded",
    "RequestIdReused",
    "Timing",
    "Unauthenticated",
    "Unavailable",
    "Usage",
]
