"""The Python SDK: ``Client`` (blocking) and ``AsyncClient`` (asyncio) for the Inference API.

    client = ferryman.Client("127.0.0.1:7001", api_key="fm_...")
    prediction = client.predict("mlp", numpy.zeros((1, 512), "float32"))
    prediction.outputs["output"], prediction.version

Retries UNAVAILABLE and overload refusals with backoff, sleeping what the server's
RetryInfo asks, within the call's timeout; the request id stays the same, so a retry
is never charged twice.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from ferryman.sdk.convert import Output, from_outputs, to_inputs
from ferryman.sdk.errors import FerrymanError, QuotaExceeded, RetryableError, from_rpc_error
from ferryman.v1 import common_pb2, inference_pb2, inference_pb2_grpc

DEFAULT_TIMEOUT_S = 30.0
DEFAULT_TARGET = "127.0.0.1:7001"
TARGET_ENV = "FERRYMAN_TARGET"
API_KEY_ENV = "FERRYMAN_API_KEY"
DEFAULT_RETRIES = 3
BACKOFF_S = 0.05
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
PRIORITIES = {
    "low": common_pb2.PRIORITY_LOW,
    "normal": common_pb2.PRIORITY_NORMAL,
    "high": common_pb2.PRIORITY_HIGH,
}


@dataclass(frozen=True)
class Usage:
    items: int
    input_tokens: int
    output_tokens: int
    cost_usd: float


@dataclass(frozen=True)
class Timing:
    queue_ms: float
    compute_ms: float
    total_ms: float
    batch_size: int


@dataclass(frozen=True)
class Prediction:
    """A model's answer: outputs by name, and which version served it."""

    request_id: str
    model: str
    version: str
    fallback: bool
    outputs: dict[str, Output]
    usage: Usage
    timing: Timing
    coalesced: bool
    cached: bool

    @classmethod
    def from_proto(cls, response: inference_pb2.PredictResponse) -> Prediction:
        def ms(d: Any) -> float:
            return float(d.ToNanoseconds()) / 1e6

        return cls(
            request_id=response.request_id,
            model=response.model,
            version=response.version,
            fallback=response.fallback,
            outputs=from_outputs(response.outputs),
            usage=Usage(
                response.usage.items,
                response.usage.input_tokens,
                response.usage.output_tokens,
                response.usage.cost_usd,
            ),
            timing=Timing(
                ms(response.timing.queue),
                ms(response.timing.compute),
                ms(response.timing.total),
                response.timing.batch_size,
            ),
            coalesced=response.coalesced,
            cached=response.cached,
        )


def _request(
    model: str,
    inputs: Any,
    info: inference_pb2.ModelInfo | None,
    *,
    user: str | None,
    priority: str | int | None,
    version: str | None,
    parameters: Mapping[str, str] | None,
    request_id: str | None,
) -> inference_pb2.PredictRequest:
    level = priority_level(priority)
    return inference_pb2.PredictRequest(
        request_id=request_id or uuid.uuid4().hex,
        model=model,
        version=version or "",
        inputs=to_inputs(inputs, info),
        parameters=dict(parameters or {}),
        user=user or "",
        priority=level,  # type: ignore[arg-type]
    )


def priority_level(priority: str | int | None) -> int:
    """The wire priority of a name ("low", "normal", "high") or number; unknown ones are errors."""
    if priority is None:
        return 0
    if isinstance(priority, str):
        if priority.lower() not in PRIORITIES:
            raise ValueError(f"unknown priority {priority!r}: one of {', '.join(PRIORITIES)}")
        return int(PRIORITIES[priority.lower()])
    if priority not in common_pb2.Priority.values():
        raise ValueError(f"unknown priority {priority!r}")
    return priority


def endpoint(target: str | None, api_key: str | None) -> tuple[str, str]:
    """Target and key as given, else from FERRYMAN_TARGET / FERRYMAN_API_KEY (as the CLI reads them)."""
    key = api_key or os.environ.get(API_KEY_ENV, "")
    if not key:
        raise ValueError(f"an API key is needed: pass api_key or set {API_KEY_ENV}")
    return target or os.environ.get(TARGET_ENV, DEFAULT_TARGET), key


def _retry_delay(error: FerrymanError, attempt: int) -> float | None:
    """Seconds to wait before retrying, or None when the error is final."""
    if not isinstance(error, RetryableError) or isinstance(error, QuotaExceeded):
        return None
    return error.retry_after if error.retry_after is not None else BACKOFF_S * 2**attempt


def channel_credentials(
    tls: bool | str | Path, credentials: grpc.ChannelCredentials | None
) -> grpc.ChannelCredentials | None:
    """Credentials for the router's channel: given ones, TLS verified against a CA file
    (``tls`` a path) or the system's roots (``tls=True``), or None for plaintext."""
    if credentials is not None or tls is False:
        return credentials
    roots = None if tls is True else Path(tls).expanduser().read_bytes()
    return grpc.ssl_channel_credentials(roots)


def _options() -> list[tuple[str, int]]:
    return [
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ]


class Client:
    """A blocking client for one Ferryman endpoint."""

    def __init__(
        self,
        target: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        retries: int = DEFAULT_RETRIES,
        tls: bool | str | Path = False,
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        """``target`` and ``api_key`` default to FERRYMAN_TARGET and FERRYMAN_API_KEY; ``tls``:
        True to verify the router with the system's CAs, or a CA file's path."""
        target, api_key = endpoint(target, api_key)
        credentials = channel_credentials(tls, credentials)
        self._channel = (
            grpc.secure_channel(target, credentials, _options())
            if credentials
            else grpc.insecure_channel(target, _options())
        )
        self._stub = inference_pb2_grpc.InferenceStub(self._channel)
        self._metadata = (("authorization", f"Bearer {api_key}"),)
        self._timeout = timeout
        self._retries = retries
        self._models: dict[str, inference_pb2.ModelInfo] = {}

    def get_model(self, model: str) -> inference_pb2.ModelInfo:
        if model not in self._models:
            try:
                self._models[model] = self._stub.GetModel(
                    inference_pb2.GetModelRequest(model=model), metadata=self._metadata, timeout=self._timeout
                )
            except grpc.RpcError as exc:
                raise from_rpc_error(exc) from None
        return self._models[model]

    def list_models(self) -> list[inference_pb2.ModelInfo]:
        try:
            response = self._stub.ListModels(
                inference_pb2.ListModelsRequest(), metadata=self._metadata, timeout=self._timeout
            )
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None
        return list(response.models)

    def predict(
        self,
        model: str,
        inputs: Any,
        *,
        user: str | None = None,
        priority: str | int | None = None,
        timeout: float | None = None,
        version: str | None = None,
        parameters: Mapping[str, str] | None = None,
        request_id: str | None = None,
    ) -> Prediction:
        """Run ``inputs`` (numpy arrays, torch tensors, lists or strings) through ``model``."""
        info = None if isinstance(inputs, Mapping) and not _needs_schema(inputs) else self.get_model(model)
        request = _request(
            model,
            inputs,
            info,
            user=user,
            priority=priority,
            version=version,
            parameters=parameters,
            request_id=request_id,
        )
        deadline = time.monotonic() + (timeout or self._timeout)
        for attempt in range(self._retries + 1):
            try:
                response = self._stub.Predict(
                    request, metadata=self._metadata, timeout=max(0.001, deadline - time.monotonic())
                )
                return Prediction.from_proto(response)
            except grpc.RpcError as exc:
                error = from_rpc_error(exc)
                delay = _retry_delay(error, attempt)
                if delay is None or attempt == self._retries or time.monotonic() + delay >= deadline:
                    raise error from None
                time.sleep(delay)
        raise AssertionError("unreachable")

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient:
    """An asyncio client for one Ferryman endpoint (same API as Client, awaited)."""

    def __init__(
        self,
        target: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        retries: int = DEFAULT_RETRIES,
        tls: bool | str | Path = False,
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        """``target`` and ``api_key`` default to FERRYMAN_TARGET and FERRYMAN_API_KEY; ``tls``:
        True to verify the router with the system's CAs, or a CA file's path."""
        target, api_key = endpoint(target, api_key)
        credentials = channel_credentials(tls, credentials)
        self._channel = (
            grpc.aio.secure_channel(target, credentials, _options())
            if credentials
            else grpc.aio.insecure_channel(target, _options())
        )
        self._stub = inference_pb2_grpc.InferenceStub(self._channel)
        self._metadata = (("authorization", f"Bearer {api_key}"),)
        self._timeout = timeout
        self._retries = retries
        self._models: dict[str, inference_pb2.ModelInfo] = {}

    async def get_model(self, model: str) -> inference_pb2.ModelInfo:
        if model not in self._models:
            try:
                self._models[model] = await self._stub.GetModel(
                    inference_pb2.GetModelRequest(model=model), metadata=self._metadata, timeout=self._timeout
                )
            except grpc.RpcError as exc:
                raise from_rpc_error(exc) from None
        return self._models[model]

    async def predict(
        self,
        model: str,
        inputs: Any,
        *,
        user: str | None = None,
        priority: str | int | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 (the SDK's documented API, as Client.predict)
        version: str | None = None,
        parameters: Mapping[str, str] | None = None,
        request_id: str | None = None,
    ) -> Prediction:
        info = (
            None if isinstance(inputs, Mapping) and not _needs_schema(inputs) else await self.get_model(model)
        )
        request = _request(
            model,
            inputs,
            info,
            user=user,
            priority=priority,
            version=version,
            parameters=parameters,
            request_id=request_id,
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (timeout or self._timeout)
        for attempt in range(self._retries + 1):
            try:
                response = await self._stub.Predict(
                    request, metadata=self._metadata, timeout=max(0.001, deadline - loop.time())
                )
                return Prediction.from_proto(response)
            except grpc.RpcError as exc:
                error = from_rpc_error(exc)
                delay = _retry_delay(error, attempt)
                if delay is None or attempt == self._retries or loop.time() + delay >= deadline:
                    raise error from None
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    async def close(self) -> None:
        await self._channel.close(grace=None)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _needs_schema(inputs: Mapping[str, Any]) -> bool:
    """Plain lists (no dtype) need the model's schema to be encoded right."""
    return any(
        isinstance(v, list | tuple) and not all(isinstance(x, str) for x in v) for v in inputs.values()
    )
