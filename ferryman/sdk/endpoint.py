"""What both SDK clients hold (``ferryman.sdk.client``): the channel's target and
credentials, the key, defaults, the client-side throttle and model schemas."""

from __future__ import annotations

from pathlib import Path

import grpc

from ferryman.sdk.calls import DEFAULT_RETRIES, DEFAULT_TIMEOUT_S, channel_credentials, endpoint
from ferryman.sdk.errors import ClientClosed
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
    ) -> None:
        """``target`` and ``api_key`` default to FERRYMAN_TARGET and FERRYMAN_API_KEY; ``tls``:
        True to verify the router with the system's CAs, or a CA file's path; ``throttle``:
        once the platform refuses most requests (RESOURCE_EXHAUSTED), refuse most of them
        here instead, as Google SRE's client-side throttling does (``ferryman.sdk.throttle``)."""
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
