"""The Open Inference Protocol v2 over gRPC (``inference.GRPCInferenceService``): converts
its calls to the transport-neutral gateway and its answers back. Errors keep their gRPC
codes and google.rpc details, as on ferryman.v1.Inference."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import grpc
from google.protobuf.message import Message
from opentelemetry.context import Context

from ferryman.errors import abort
from ferryman.oip.v2 import grpc_predict_v2_pb2 as oip
from ferryman.v1 import inference_pb2
from ferryman_server.kernel.serving import ServicerContext
from ferryman_server.kernel.telemetry import context_from_metadata
from ferryman_server.registry.snapshot import TenantRecord
from ferryman_server.router.auth import bearer_key
from ferryman_server.router.doors.decoding import Undecodable, register_service, tolerant, undecodable
from ferryman_server.router.doors.oip import convert
from ferryman_server.router.doors.oip.tensors import (
    TensorProblem,
    datatype,
    grpc_inputs,
    raw_contents,
    select_outputs,
    shape,
)
from ferryman_server.router.failures import RequestFailed
from ferryman_server.router.gateway import Gateway, Rejected, StreamItem
from ferryman_server.router.spans import Protocol, grpc_door

SERVICE = oip.DESCRIPTOR.services_by_name["GRPCInferenceService"].full_name
SERVER_VERSION = "2"
INFER = grpc_door(Protocol.OIP_GRPC, SERVICE, "ModelInfer")
STREAM_INFER = grpc_door(Protocol.OIP_GRPC, SERVICE, "ModelStreamInfer")


def oip_response(response: inference_pb2.PredictResponse, wanted: list[str]) -> oip.ModelInferResponse:
    outputs = select_outputs(response.outputs, wanted)
    return oip.ModelInferResponse(
        model_name=response.model,
        model_version=response.version,
        id=response.request_id,
        parameters={k: convert.infer_parameter(v) for k, v in convert.usage_parameters(response).items()},
        outputs=[
            oip.ModelInferResponse.InferOutputTensor(name=o.name, datatype=datatype(o), shape=shape(o))
            for o in outputs
        ],
        raw_output_contents=[raw_contents(o) for o in outputs],
    )


class OipServicer:
    """``inference.GRPCInferenceService`` over the gateway."""

    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway

    async def _tenant(self, context: ServicerContext) -> TenantRecord:
        try:
            return self._gateway.tenant(bearer_key(context.invocation_metadata()), Protocol.OIP_GRPC)
        except RequestFailed as failed:
            await abort(context, failed.status)
            raise

    def _request(
        self, request: oip.ModelInferRequest, tenant: TenantRecord
    ) -> tuple[inference_pb2.PredictRequest, list[str]]:
        """The neutral request and the outputs asked for; RequestFailed when unconvertible."""
        wanted = [o.name for o in request.outputs]
        if wanted:
            convert.check_outputs(self._gateway.catalog.get_model(tenant, request.model_name), wanted)
        try:
            inputs = grpc_inputs(request)
        except TensorProblem as problem:
            raise convert.problem_failure(problem) from None
        neutral = convert.predict_request(
            request.model_name, request.model_version, request.id, convert.grpc_parameters(request), inputs
        )
        return neutral, wanted

    async def ServerLive(
        self, request: oip.ServerLiveRequest, context: ServicerContext
    ) -> oip.ServerLiveResponse:
        return oip.ServerLiveResponse(live=True)

    async def ServerReady(
        self, request: oip.ServerReadyRequest, context: ServicerContext
    ) -> oip.ServerReadyResponse:
        return oip.ServerReadyResponse(ready=self._gateway.serving)

    async def ServerMetadata(
        self, request: oip.ServerMetadataRequest, context: ServicerContext
    ) -> oip.ServerMetadataResponse:
        return oip.ServerMetadataResponse(
            name=convert.SERVER_NAME, version=SERVER_VERSION, extensions=convert.EXTENSIONS
        )

    async def ModelReady(
        self, request: oip.ModelReadyRequest, context: ServicerContext
    ) -> oip.ModelReadyResponse:
        tenant = await self._tenant(context)
        try:
            return oip.ModelReadyResponse(
                ready=self._gateway.catalog.ready(tenant, request.name, request.version)
            )
        except RequestFailed as failed:
            await abort(context, failed.status)
            raise

    async def ModelMetadata(
        self, request: oip.ModelMetadataRequest, context: ServicerContext
    ) -> oip.ModelMetadataResponse:
        tenant = await self._tenant(context)
        try:
            info = self._gateway.catalog.get_model(tenant, request.name)
            return convert.metadata(
                info, self._gateway.catalog.version(tenant, request.name, request.version)
            )
        except RequestFailed as failed:
            await abort(context, failed.status)
            raise

    async def ModelConfig(
        self, request: oip.ModelConfigRequest, context: ServicerContext
    ) -> oip.ModelConfigResponse:
        tenant = await self._tenant(context)
        try:
            record = self._gateway.catalog.version(tenant, request.name, request.version)
        except RequestFailed as failed:
            await abort(context, failed.status)
            raise
        return oip.ModelConfigResponse(config=convert.config(record))

    async def ModelStatistics(
        self, request: oip.ModelStatisticsRequest, context: ServicerContext
    ) -> oip.ModelStatisticsResponse:
        tenant = await self._tenant(context)
        try:
            models = (
                [request.name]
                if request.name
                else [m.name for m in self._gateway.catalog.list_models(tenant).models]
            )
            entries = [
                entry
                for model in models
                for entry in convert.statistics(
                    model, self._gateway.statistics(tenant, model), request.version
                ).model_stats
            ]
        except RequestFailed as failed:
            await abort(context, failed.status)
            raise
        return oip.ModelStatisticsResponse(model_stats=entries)

    async def ModelInfer(
        self, request: oip.ModelInferRequest | Undecodable, context: ServicerContext
    ) -> oip.ModelInferResponse:
        tenant = await self._tenant(context)
        try:
            if isinstance(request, Undecodable):
                raise RequestFailed(undecodable(request))
            neutral, wanted = self._request(request, tenant)
            response = await self._gateway.predict(
                neutral,
                tenant,
                self._gateway.deadline(context.time_remaining()),
                context_from_metadata(context.invocation_metadata()),
                INFER,
            )
            return oip_response(response, wanted)
        except TensorProblem as problem:  # an output missing from the version that answered
            await abort(context, convert.problem_failure(problem).status)
            raise
        except RequestFailed as failed:
            await abort(context, failed.status)
            raise

    async def ModelStreamInfer(
        self, request_iterator: AsyncIterator[oip.ModelInferRequest | Undecodable], context: ServicerContext
    ) -> AsyncIterator[oip.ModelStreamInferResponse]:
        tenant = await self._tenant(context)
        wanted: dict[str, list[str]] = {}

        async def neutral() -> AsyncIterator[StreamItem]:
            async for request in request_iterator:
                if isinstance(request, Undecodable):
                    yield Rejected("", undecodable(request))
                    continue
                try:
                    converted, outputs = self._request(request, tenant)
                except RequestFailed as failed:
                    yield Rejected(request.id, failed.status)
                    continue
                if not converted.request_id:
                    # A stream's answers are matched to their requests by id (the door's
                    # own, which keeps no answer: nobody repeats it).
                    converted.request_id = uuid.uuid4().hex
                    converted.generated_request_id = True
                wanted[converted.request_id] = outputs
                yield converted

        parent: Context = context_from_metadata(context.invocation_metadata())
        answers = self._gateway.predict_stream(
            neutral(), tenant, self._gateway.deadline(context.time_remaining()), parent, STREAM_INFER
        )
        try:
            async for answer in answers:
                yield stream_answer(answer, wanted.pop(answer.request_id, []))
        finally:
            await answers.aclose()


def stream_answer(
    answer: inference_pb2.PredictStreamResponse, wanted: list[str]
) -> oip.ModelStreamInferResponse:
    if answer.WhichOneof("result") == "response":
        try:
            return oip.ModelStreamInferResponse(infer_response=oip_response(answer.response, wanted))
        except TensorProblem as problem:
            return oip.ModelStreamInferResponse(
                error_message=str(problem), infer_response=oip.ModelInferResponse(id=answer.request_id)
            )
    return oip.ModelStreamInferResponse(
        error_message=answer.error.message, infer_response=oip.ModelInferResponse(id=answer.request_id)
    )


def add_oip_servicer(servicer: OipServicer, server: grpc.aio.Server) -> None:
    """Register the OIP service, parsing inference requests tolerantly (an unparsable one is
    answered INVALID_ARGUMENT, not INTERNAL)."""
    strict: dict[str, tuple[type[Message], type[Message]]] = {
        "ServerLive": (oip.ServerLiveRequest, oip.ServerLiveResponse),
        "ServerReady": (oip.ServerReadyRequest, oip.ServerReadyResponse),
        "ModelReady": (oip.ModelReadyRequest, oip.ModelReadyResponse),
        "ServerMetadata": (oip.ServerMetadataRequest, oip.ServerMetadataResponse),
        "ModelMetadata": (oip.ModelMetadataRequest, oip.ModelMetadataResponse),
        "ModelConfig": (oip.ModelConfigRequest, oip.ModelConfigResponse),
        "ModelStatistics": (oip.ModelStatisticsRequest, oip.ModelStatisticsResponse),
    }
    handlers = {
        name: grpc.unary_unary_rpc_method_handler(
            getattr(servicer, name),
            request_deserializer=request.FromString,
            response_serializer=response.SerializeToString,
        )
        for name, (request, response) in strict.items()
    }
    handlers["ModelInfer"] = grpc.unary_unary_rpc_method_handler(
        servicer.ModelInfer,
        request_deserializer=tolerant(oip.ModelInferRequest.FromString),
        response_serializer=oip.ModelInferResponse.SerializeToString,
    )
    handlers["ModelStreamInfer"] = grpc.stream_stream_rpc_method_handler(
        servicer.ModelStreamInfer,
        request_deserializer=tolerant(oip.ModelInferRequest.FromString),
        response_serializer=oip.ModelStreamInferResponse.SerializeToString,
    )
    register_service(server, SERVICE, handlers)
