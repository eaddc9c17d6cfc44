"""The public Inference servicer: converts gRPC calls to the transport-neutral gateway
(metadata to a key and trace context, the call's time to a deadline) and its failures to
statuses."""

from __future__ import annotations

from collections.abc import AsyncIterator

from ferryman.errors import abort
from ferryman.v1 import inference_pb2, inference_pb2_grpc
from ferryman_server.kernel.serving import ServicerContext
from ferryman_server.kernel.telemetry import context_from_metadata
from ferryman_server.registry.snapshot import TenantRecord
from ferryman_server.router.auth import bearer_key
from ferryman_server.router.doors.decoding import Undecodable, undecodable
from ferryman_server.router.failures import RequestFailed
from ferryman_server.router.feedback import FeedbackDesk
from ferryman_server.router.gateway import Gateway, Rejected, StreamItem


async def calling_tenant(gateway: Gateway, context: ServicerContext) -> TenantRecord:
    """The tenant of the call's bearer key; a missing, unknown or revoked one ends the call."""
    try:
        return gateway.tenant(bearer_key(context.invocation_metadata()))
    except RequestFailed as failed:
        await abort(context, failed.status)
        raise


def decoded(
    requests: AsyncIterator[inference_pb2.PredictRequest | Undecodable],
) -> AsyncIterator[StreamItem]:
    """A stream's requests as the gateway takes them: one that could not be parsed is
    answered on its own with why (it has no request id to answer under)."""

    async def items() -> AsyncIterator[StreamItem]:
        async for request in requests:
            yield Rejected("", undecodable(request)) if isinstance(request, Undecodable) else request

    return items()


class InferenceServicer(inference_pb2_grpc.InferenceServicer):
    def __init__(self, gateway: Gateway, feedback: FeedbackDesk) -> None:
        self._gateway = gateway
        self._feedback = feedback

    async def _tenant(self, context: ServicerContext) -> TenantRecord:
        return await calling_tenant(self._gateway, context)

    async def Predict(
        self, request: inference_pb2.PredictRequest | Undecodable, context: ServicerContext
    ) -> inference_pb2.PredictResponse:
        tenant = await self._tenant(context)
        try:
            if isinstance(request, Undecodable):
                raise RequestFailed(undecodable(request))
            return await self._gateway.predict(
                request,
                tenant,
                self._gateway.deadline(context.time_remaining()),
                context_from_metadata(context.invocation_metadata()),
            )
        except RequestFailed as failed:
            await abort(context, failed.status)
            raise

    async def PredictStream(
        self,
        request_iterator: AsyncIterator[inference_pb2.PredictRequest | Undecodable],
        context: ServicerContext,
    ) -> AsyncIterator[inference_pb2.PredictStreamResponse]:
        tenant = await self._tenant(context)
        answers = self._gateway.predict_stream(
            decoded(request_iterator),
            tenant,
            self._gateway.deadline(context.time_remaining()),
            context_from_metadata(context.invocation_metadata()),
        )
        try:
            async for answer in answers:
                yield answer
        finally:
            await answers.aclose()  # the caller left or the call ended: stop what still runs

    async def Generate(
        self, request: inference_pb2.GenerateRequest | Undecodable, context: ServicerContext
    ) -> AsyncIterator[inference_pb2.GenerateResponse]:
        tenant = await self._tenant(context)
        if isinstance(request, Undecodable):
            await abort(context, undecodable(request))
            return
        answers = self._gateway.generate(
            request,
            tenant,
            self._gateway.deadline(context.time_remaining()),
            context_from_metadata(context.invocation_metadata()),
        )
        try:
            async for answer in answers:
                yield answer
        except RequestFailed as failed:
            await abort(context, failed.status)
        finally:
            await answers.aclose()  # the caller left: the generation ends at the node's next step

    async def ListModels(
        self, request: inference_pb2.ListModelsRequest, context: ServicerContext
    ) -> inference_pb2.ListModelsResponse:
        return self._gateway.catalog.list_models(await self._tenant(context))

    async def GetModel(
        self, request: inference_pb2.GetModelRequest, context: ServicerContext
    ) -> inference_pb2.ModelInfo:
        tenant = await self._tenant(context)
        try:
            return self._gateway.catalog.get_model(tenant, request.model)
        except RequestFailed as failed:
            await abort(context, failed.status)
            raise

    async def Feedback(
        self, request: inference_pb2.FeedbackRequest | Undecodable, context: ServicerContext
    ) -> inference_pb2.FeedbackResponse:
        tenant = await self._tenant(context)
        try:
            if isinstance(request, Undecodable):
                raise RequestFailed(undecodable(request))
            return await self._feedback.record(tenant.name, request)
        except RequestFailed as failed:
            await abort(context, failed.status)
            raise
