"""The gRPC doors' method handlers, with request parsing that never fails the RPC.

A request protobuf cannot parse (invalid UTF-8 in a string field, truncated bytes) would
otherwise be answered INTERNAL by grpc before our code sees it; here it reaches the
servicer as ``Undecodable`` and is answered INVALID_ARGUMENT with the parser's reason.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from google.rpc import status_pb2

from ferryman.errors import Reason, make_status
from ferryman.v1 import inference_pb2, inference_pb2_grpc, jobs_pb2_grpc
from ferryman_server.kernel.logs import incident, internal_message

log = logging.getLogger("ferryman.router")

SERVICE = "ferryman.v1.Inference"
JOBS_SERVICE = "ferryman.v1.Jobs"


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


def guarded(method: str, handler: grpc.RpcMethodHandler[Any, Any]) -> grpc.RpcMethodHandler[Any, Any]:
    """``handler`` answering a failure that is ours (an exception no door converted) with
    INTERNAL and a correlation id, the exception only in the log: grpc's own answer would be
    UNKNOWN with the exception's text (paths, addresses, another tenant's data)."""

    async def fail(context: grpc.aio.ServicerContext[Any, Any]) -> None:
        await context.abort(grpc.StatusCode.INTERNAL, internal_message(incident(log, f"{method} failed")))

    def unary(behaviour: Callable[..., Any]) -> Callable[..., Any]:
        async def call(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            try:
                return await behaviour(request, context)
            except (grpc.aio.AbortError, asyncio.CancelledError):
                raise
            except Exception:
                await fail(context)

        return call

    def streaming(behaviour: Callable[..., Any]) -> Callable[..., Any]:
        async def call(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
            try:
                async for answer in behaviour(request, context):
                    yield answer
            except (grpc.aio.AbortError, asyncio.CancelledError):
                raise
            except Exception:
                await fail(context)

        return call

    if handler.unary_unary is not None:
        return handler._replace(unary_unary=unary(handler.unary_unary))  # type: ignore[attr-defined, no-any-return]
    if handler.stream_unary is not None:
        return handler._replace(stream_unary=unary(handler.stream_unary))  # type: ignore[attr-defined, no-any-return]
    if handler.unary_stream is not None:
        return handler._replace(unary_stream=streaming(handler.unary_stream))  # type: ignore[attr-defined, no-any-return]
    assert handler.stream_stream is not None
    return handler._replace(stream_stream=streaming(handler.stream_stream))  # type: ignore[attr-defined, no-any-return]


def register_service(
    server: grpc.aio.Server, service: str, handlers: dict[str, grpc.RpcMethodHandler[Any, Any]]
) -> None:
    """Register a tenant-facing service's method handlers as the generated helpers do
    (generic and registered, so calls dispatch without a per-call lookup), each ``guarded``."""
    handlers = {name: guarded(f"{service}/{name}", handler) for name, handler in handlers.items()}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))
    server.add_registered_method_handlers(service, handlers)  # type: ignore[attr-defined]


class _Recorder:
    """Stands in for a server to a generated ``add_*Servicer_to_server``: keeps its handlers."""

    def __init__(self) -> None:
        self.handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}

    def add_generic_rpc_handlers(self, handlers: object) -> None:
        pass

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
        self.handlers = dict(handlers)


def add_jobs_servicer(servicer: jobs_pb2_grpc.JobsServicer, server: grpc.aio.Server) -> None:
    """Register the Jobs servicer with the generated helper's handlers, ``guarded``."""
    recorder = _Recorder()
    jobs_pb2_grpc.add_JobsServicer_to_server(servicer, recorder)
    register_service(server, JOBS_SERVICE, recorder.handlers)
