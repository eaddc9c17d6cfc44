"""The Node gRPC servicer: a thin shell over the node (``service.Node``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from ferryman.v1 import node_pb2, node_pb2_grpc
from ferryman_server.gpu_node.service import Node
from ferryman_server.gpu_node.serving import NodeRefusal
from ferryman_server.kernel.serving import ServicerContext


class NodeServicer(node_pb2_grpc.NodeServicer):
    def __init__(self, node: Node) -> None:
        self._node = node

    async def InferBatch(
        self, request: node_pb2.InferBatchRequest, context: ServicerContext
    ) -> node_pb2.InferBatchResponse:
        try:
            return await self._node.serving.infer(request)
        except NodeRefusal as exc:
            await context.abort(grpc.StatusCode[exc.code], str(exc))
            raise  # abort raises; this keeps type checkers honest

    async def LoadModel(
        self, request: node_pb2.LoadModelRequest, context: ServicerContext
    ) -> node_pb2.LoadModelResponse:
        loaded = await self._node.versions.load(
            request.spec, expected_bytes=request.memory_bytes, evict=request.evict
        )
        return node_pb2.LoadModelResponse(
            state=loaded.slot.state.to_proto(),
            reason=loaded.slot.reason,
            no_room=loaded.no_room,
            evicted=loaded.evicted,
            memory_bytes=loaded.need,
        )

    async def UnloadModel(
        self, request: node_pb2.UnloadModelRequest, context: ServicerContext
    ) -> node_pb2.UnloadModelResponse:
        return node_pb2.UnloadModelResponse(
            unloaded=await self._node.versions.unload(request.model, request.version)
        )

    async def Generate(
        self, request: node_pb2.NodeGenerateRequest, context: ServicerContext
    ) -> AsyncIterator[node_pb2.GenerateEvent]:
        try:
            async for event in self._node.serving.generate(request):
                yield event
        except NodeRefusal as exc:
            await context.abort(grpc.StatusCode[exc.code], str(exc))

    async def NodeInfo(
        self, request: node_pb2.NodeInfoRequest, context: ServicerContext
    ) -> node_pb2.NodeInfoResponse:
        return self._node.info()
