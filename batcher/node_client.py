"""The batcher's port to a node: what the dispatcher and the replica directory ask of one.

``GrpcNodeClient`` is the real one (the Node service over gRPC, with service
credentials); tests drive retries, bisection and breakers with fakes that implement
the same protocol and raise ``NodeCallError`` as the real one does.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from typing import Any, Protocol

import grpc
from google.protobuf.message import Message

from ferryman.v1 import node_pb2, node_pb2_grpc
from ferryman_server.kernel.security import Security, aio_channel
from ferryman_server.kernel.serving import channel_options


class NodeCallError(Exception):
    """A call to a node failed with ``code`` (a gRPC status code) and ``details``."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details


class NodeClient(Protocol):
    """One node, as the batcher uses it."""

    async def infer_batch(
        self, request: node_pb2.InferBatchRequest, timeout_s: float
    ) -> node_pb2.InferBatchResponse:
        """Run one batch; raises NodeCallError."""
        ...

    async def node_info(self, timeout_s: float) -> node_pb2.NodeInfoResponse:
        """The node's versions and their warm-up profiles; raises NodeCallError."""
        ...

    async def load_model(
        self, request: node_pb2.LoadModelRequest, timeout_s: float
    ) -> node_pb2.LoadModelResponse:
        """Load a version there (it answers once SERVING or FAILED); raises NodeCallError."""
        ...

    def generate(
        self, request: node_pb2.NodeGenerateRequest, timeout_s: float
    ) -> AsyncGenerator[node_pb2.GenerateEvent]:
        """One generation's events; raises NodeCallError (before or between events).
        Closing the iterator early ends the generation on the node."""
        ...

    async def close(self) -> None: ...


NODE_INFO_TIMEOUT_S = 2.0
"""How long a node has to answer NodeInfo (its memory, versions and profiles)."""

NodeConnector = Callable[[str], NodeClient]
"""Makes the client for a node's address."""


class GrpcNodeClient:
    """The Node service over a gRPC channel, every call with the service credentials."""

    def __init__(self, address: str, security: Security, max_message_bytes: int) -> None:
        self._channel = aio_channel(address, security, channel_options(max_message_bytes))
        self._stub = node_pb2_grpc.NodeStub(self._channel)
        self._metadata = security.metadata()

    async def _unary(self, method: Any, request: Message, timeout_s: float) -> Any:
        """One unary call with the service credentials; its errors as NodeCallError."""
        try:
            return await method(request, timeout=timeout_s, metadata=self._metadata)
        except grpc.aio.AioRpcError as exc:
            raise NodeCallError(exc.code(), exc.details() or "") from None

    async def infer_batch(
        self, request: node_pb2.InferBatchRequest, timeout_s: float
    ) -> node_pb2.InferBatchResponse:
        response: node_pb2.InferBatchResponse = await self._unary(self._stub.InferBatch, request, timeout_s)
        return response

    async def node_info(self, timeout_s: float) -> node_pb2.NodeInfoResponse:
        info: node_pb2.NodeInfoResponse = await self._unary(
            self._stub.NodeInfo, node_pb2.NodeInfoRequest(), timeout_s
        )
        return info

    async def load_model(
        self, request: node_pb2.LoadModelRequest, timeout_s: float
    ) -> node_pb2.LoadModelResponse:
        answer: node_pb2.LoadModelResponse = await self._unary(self._stub.LoadModel, request, timeout_s)
        return answer

    async def generate(
        self, request: node_pb2.NodeGenerateRequest, timeout_s: float
    ) -> AsyncGenerator[node_pb2.GenerateEvent]:
        call = self._stub.Generate(request, timeout=timeout_s, metadata=self._metadata)
        try:
            async for event in call:
                yield event
        except grpc.aio.AioRpcError as exc:
            raise NodeCallError(exc.code(), exc.details() or "") from None
        finally:
            call.cancel()  # a caller that left ends the node's generation at its next step

    async def close(self) -> None:
        await self._channel.close(grace=None)
