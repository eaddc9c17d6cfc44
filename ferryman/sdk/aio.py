"""The Python SDK for asyncio: ``AsyncClient``, ``Client``'s API awaited (retries, errors,
streams and jobs as ``ferryman.sdk.client`` describes).

    async with ferryman.AsyncClient("127.0.0.1:7001", api_key="fm_...") as client:
        prediction = await client.predict("mlp", numpy.zeros((1, 512), "float32"))
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import grpc

from ferryman.sdk.calls import (
    DEFAULT_MAX_TOKENS,
    Metadata,
    build_request,
    call_metadata,
    call_timeout,
    needs_schema,
    out_of_time,
    renamed,
    retry_or_raise,
    stream_answer,
    stream_options,
    tagged,
    unreachable,
)
from ferryman.sdk.endpoint import Endpoint
from ferryman.sdk.errors import DeadlineExceeded, FerrymanError, from_rpc_error
from ferryman.sdk.generation import Chunk, Message, build_generate, stream_async
from ferryman.sdk.jobs import AsyncJobs
from ferryman.sdk.prediction import Prediction
from ferryman.sdk.spill import spilled_late_async
from ferryman.sdk.throttle import throttled
from ferryman.v1 import inference_pb2

__all__ = ["AsyncClient"]


class AsyncClient(Endpoint):
    """An asyncio client for one Ferryman endpoint (same API as Client, awaited)."""

    def _open_channel(self) -> grpc.aio.Channel:
        self._channel = (
            grpc.aio.secure_channel(self._target, self._credentials, self._options)
            if self._credentials
            else grpc.aio.insecure_channel(self._target, self._options)
        )
        return self._channel

    @property
    def jobs(self) -> AsyncJobs:
        """Durable jobs on this client's channel (``ferryman.sdk.jobs``), awaited."""
        self._check_open()
        return AsyncJobs(self._channel, self._metadata, self._timeout, self.get_model, self._retries)

    async def get_model(self, model: str, *, metadata: Metadata | None = None) -> inference_pb2.ModelInfo:
        self._check_open()
        try:
            return await self._model_info(model, metadata, self._timeout)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None

    async def _model_info(
        self, model: str, metadata: Metadata | None, timeout_s: float, ready: bool = False
    ) -> inference_pb2.ModelInfo:
        """The model's schema, asked once per client (gRPC's own errors come out as they are);
        ``ready``: wait for the channel to connect (gRPC's wait_for_ready)."""
        if model not in self._models:
            self._models[model] = await self._stub.GetModel(
                inference_pb2.GetModelRequest(model=model),
                metadata=call_metadata(self._metadata, metadata),
                timeout=timeout_s,
                wait_for_ready=ready,
            )
        return self._models[model]

    async def list_models(self, *, metadata: Metadata | None = None) -> list[inference_pb2.ModelInfo]:
        self._check_open()
        try:
            response = await self._stub.ListModels(
                inference_pb2.ListModelsRequest(),
                metadata=call_metadata(self._metadata, metadata),
                timeout=self._timeout,
            )
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None
        return list(response.models)

    async def feedback(
        self, request_id: str, metric: str, value: float = 1.0, *, metadata: Metadata | None = None
    ) -> inference_pb2.FeedbackResponse:
        """Report an outcome (a click, a conversion, a rating) of an answered request, recorded
        against the version that served it; once per metric and request."""
        self._check_open()
        try:
            response: inference_pb2.FeedbackResponse = await self._stub.Feedback(
                inference_pb2.FeedbackRequest(request_id=request_id, metric=metric, value=value),
                metadata=call_metadata(self._metadata, metadata),
                timeout=self._timeout,
            )
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None
        return response

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
        metadata: Metadata | None = None,
        spill_to_job: bool = False,
    ) -> Prediction:
        self._check_open()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + call_timeout(timeout, self._timeout)
        # The id is chosen first: every error, the schema lookup's included, carries it.
        rid = request_id or uuid.uuid4().hex
        request: inference_pb2.PredictRequest | None = None
        refreshed = False
        down: FerrymanError | None = None
        """The router was unreachable: attempts wait for the channel to connect."""
        call = call_metadata(self._metadata, metadata)
        try:
            for attempt in range(self._retries + 1):
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise tagged(out_of_time(), rid)
                # A request that may spill into a job is always sent: refused locally, it would be lost.
                if spill_to_job or self._throttle.admit():
                    try:
                        if request is None:
                            # The schema lookup is the call's first step, within its budget and
                            # retries (numpy inputs need it; an unreachable router is retried).
                            needed = needs_schema(inputs)
                            info = (
                                await self._model_info(model, metadata, remaining, down is not None)
                                if needed
                                else None
                            )
                            request = build_request(
                                model,
                                inputs,
                                info,
                                user=user,
                                priority=priority,
                                version=version,
                                parameters=parameters,
                                request_id=rid,
                                spill_to_job=spill_to_job,
                                generated_id=not request_id,
                            )
                        response = await self._stub.Predict(
                            request, metadata=call, timeout=remaining, wait_for_ready=down is not None
                        )
                        self._throttle.answered(grpc.StatusCode.OK)
                        return Prediction.from_proto(response)
                    except grpc.RpcError as exc:
                        error = tagged(from_rpc_error(exc), rid)
                        self._throttle.answered(error.code, error.reason)
                        if (
                            down is not None
                            and exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED
                            and not error.reason
                        ):
                            raise down from None  # no router came back within the call's time
                else:
                    error = tagged(throttled(), rid)
                if down is None and unreachable(error) and attempt < self._retries:
                    down = error
                    continue
                if attempt < self._retries and renamed(request, error):
                    rid = request.request_id
                    continue
                if not refreshed and attempt < self._retries and self._forget_schema(model, inputs, error):
                    request, refreshed = None, True  # built again from the model's schema now
                    continue
                await asyncio.sleep(retry_or_raise(error, attempt, self._retries, loop.time(), deadline))
        except DeadlineExceeded as late:
            if request is None:
                raise  # the schema was never had: nothing was sent to spill
            raise await spilled_late_async(self._channel, request, late, tuple(call)) from None
        raise AssertionError("unreachable")

    async def predict_many(
        self,
        model: str,
        inputs: Sequence[Any],
        *,
        timeout: float | None = None,  # noqa: ASYNC109 (as Client.predict_many)
        metadata: Metadata | None = None,
        **options: Any,
    ) -> AsyncIterator[Prediction | FerrymanError]:
        """As ``Client.predict_many``, but yields each answer (or error) as it arrives,
        in the order the server answers."""
        self._check_open()
        info = await self.get_model(model, metadata=metadata) if any(map(needs_schema, inputs)) else None
        requests = [
            build_request(model, one, info, request_id=None, **stream_options(options)) for one in inputs
        ]
        call = self._stub.PredictStream(
            iter(requests),
            metadata=call_metadata(self._metadata, metadata),
            timeout=call_timeout(timeout, self._timeout),
        )
        try:
            async for reply in call:
                yield stream_answer(reply)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None

    def generate(
        self,
        model: str,
        prompt: str,
        *,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        timeout: float | None = None,
        metadata: Metadata | None = None,
        **options: Any,
    ) -> AsyncIterator[Chunk]:
        """``Client.generate`` as an async iterator."""
        return self._stream(
            build_generate(model, prompt=prompt, max_tokens=max_tokens, **options), timeout, metadata
        )

    def chat(
        self,
        model: str,
        messages: Sequence[Message],
        *,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        timeout: float | None = None,
        metadata: Metadata | None = None,
        **options: Any,
    ) -> AsyncIterator[Chunk]:
        """``Client.chat`` as an async iterator."""
        return self._stream(
            build_generate(model, messages=messages, max_tokens=max_tokens, **options), timeout, metadata
        )

    def _stream(
        self, request: inference_pb2.GenerateRequest, timeout: float | None, metadata: Metadata | None
    ) -> AsyncIterator[Chunk]:
        self._check_open()
        deadline = asyncio.get_running_loop().time() + call_timeout(timeout, self._timeout)
        return stream_async(
            self._stub, request, call_metadata(self._metadata, metadata), deadline, self._retries
        )

    async def close(self) -> None:
        self._closed = True
        await self._channel.close(grace=None)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
