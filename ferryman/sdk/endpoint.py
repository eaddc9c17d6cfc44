"""What both SDK clients hold (``ferryman.sdk.client``): the channel's target and
credentials, the key, defaults, the client-side throttle and model schemas."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc

from ferryman.sdk.calls import (
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT_S,
    KEEPALIVE_S,
    MIN_KEEPALIVE_S,
    channel_credentials,
    channel_options,
    endpoint,
    needs_schema,
)
from ferryman.sdk.errors import ClientClosed, FerrymanError, InvalidInput
from ferryman.sdk.throttle import AdaptiveThrottle
from ferryman.v1 import inference_pb2, inference_pb2_grpc


class Endpoint:
    """What both clients hold: the channel's target and credentials, the key, defaults
    and model schemas."""

    def __init__(
        self,
        target: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        retries: int = DEFAULT_RETRIES,
        tls: bool | str | Path = False,
        credentials: grpc.ChannelCredentials | None = None,
        throttle: bool = True,
        keepalive_s: float = KEEPALIVE_S,
    ) -> None:
        """``target`` and ``api_key`` default to FERRYMAN_TARGET and FERRYMAN_API_KEY; ``tls``:
        True to verify the router with the system's CAs, or a CA file's path; ``throttle``:
        once the platform refuses most requests (RESOURCE_EXHAUSTED), refuse most of them
        here instead, as Google SRE's client-side throttling does (``ferryman.sdk.throttle``);
        ``keepalive_s``: how often an open call's connection is pinged (a dead one is found
        within this plus 10 s; the router accepts pings every 5 s at most)."""
        if keepalive_s < MIN_KEEPALIVE_S:
            raise ValueError(
                f"keepalive_s must be at least {MIN_KEEPALIVE_S} s (the router refuses faster pings)"
            )
        self._options = channel_options(keepalive_s)
        self._target, api_key = endpoint(target, api_key)
        self._credentials = channel_credentials(tls, credentials)
        self._metadata = (("authorization", f"Bearer {api_key}"),)
        self._timeout = timeout
        self._retries = retries
        self._throttle = AdaptiveThrottle(enabled=throttle)
        self._models: dict[str, inference_pb2.ModelInfo] = {}
        self._closed = False
        self._stub = inference_pb2_grpc.InferenceStub(self._open_channel())

    def _open_channel(self) -> grpc.Channel | grpc.aio.Channel:
        """The channel to ``self._target`` (blocking or asyncio, by client)."""
        raise NotImplementedError

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosed()

    def _forget_schema(self, model: str, inputs: Any, error: FerrymanError) -> bool:
        """Whether ``error`` may come from this client's copy of the model's schema, made
        before a new version changed it: the copy is dropped (to be asked again) and True."""
        if not isinstance(error, InvalidInput) or not needs_schema(inputs):
            return False
        return self._models.pop(model, None) is not None
