"""The gRPC doors' method handlers, with request parsing that never fails the RPC.

A request protobuf cannot parse (invalid UTF-8 in a string field, truncated bytes) would
otherwise be answered INTERNAL by grpc before our code sees it; here it reaches the
servicer as ``Undecodable`` and is answered INVALID_ARGUMENT with the parser's reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from google.rpc import status_pb2

from ferryman.errors import Reason, make_status
from ferryman.v1 import inference_pb2, inference_pb2_grpc

SERVICE = "ferryman.v1.Inference"


@dataclass(frozen=True)
class Undecodable:
    """A request message that could not be parsed, and why."""

    reason: str


def undecodable(request: Undecodable) -> status_pb2.Status:
    return make_status(
        grpc.StatusCode.INVALID_ARGUMENT,
        f"the request could not be parsed: {request.reason}",
        reason=Reason.UNDECODABLE,
        violations=[("request", request.reason)],
    )


def tolerant(parse: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def deserialize(data: bytes) -> Any:
        try:
            return parse(data)
        except DecodeError as exc:
            return Undecodable(str(exc))

    return deserialize


def add_inference_servicer(servicer: inference_pb2_grpc.InferenceServicer, server: grpc.aio.Server) -> None:
    """Register ``servicer`` like the generated helper does, with tolerant request parsing."""
    handlers = {
        "Predict": grpc.unary_unary_rpc_method_handler(
            servicer.Predict,
            request_deserializer=tolerant(inference_pb2.PredictRequest.FromString),
            response_serializer=inference_pb2.PredictResponse.SerializeToString,
        ),
        "PredictStream": grpc.stream_stream_rpc_method_handler(
            servicer.PredictStream,
            request_deserializer=tolerant(inference_pb2.PredictRequest.FromString),
            response_serializer=inference_pb2.PredictStreamResponse.SerializeToString,
        ),
        "Generate": grpc.unary_stream_rpc_method_handler(
            servicer.Generate,
            request_deserializer=tolerant(inference_pb2.GenerateRequest.FromString),
            response_serializer=inference_pb2.GenerateResponse.SerializeToString,
        ),
        "Feedback": grpc.unary_unary_rpc_method_handler(
            servicer.Feedback,
            request_deserializer=tolerant(inference_pb2.FeedbackRequest.FromString),
            response_serializer=inference_pb2.FeedbackResponse.SerializeToString,
        ),
        "ListModels": grpc.unary_unary_rpc_method_handler(
            servicer.ListModels,
            request_deserializer=inference_pb2.ListModelsRequest.FromString,
            response_serializer=inference_pb2.ListModelsResponse.SerializeToString,
        ),
        "GetModel": grpc.unary_unary_rpc_method_handler(
            servicer.GetModel,
            request_deserializer=inference_pb2.GetModelRequest.FromString,
            response_serializer=inference_pb2.ModelInfo.SerializeToString,
        ),
    }
    register_service(server, SERVICE, handlers)


def register_service(
    server: grpc.aio.Server, service: str, handlers: dict[str, grpc.RpcMethodHandler[Any, Any]]
) -> None:
    """Register a service's method handlers as the generated helpers do (generic and
    registered, so calls dispatch without a per-call lookup)."""
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))
    server.add_registered_method_handlers(service, handlers)  # type: ignore[attr-defined]
