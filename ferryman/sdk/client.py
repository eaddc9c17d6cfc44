"""The Python SDK: ``Client``, the blocking client for the Inference API (``AsyncClient``,
in ``ferryman.sdk.aio``, is the same API for asyncio).

    client = ferryman.Client("127.0.0.1:7001", api_key="fm_...")
    prediction = client.predict("mlp", numpy.zeros((1, 512), "float32"))
    prediction.outputs["output"], prediction.version

Retries UNAVAILABLE, a server's CANCELLED (a router stopping) and overload refusals with
jittered backoff, sleeping what the server's RetryInfo asks, within the call's timeout; the
request id stays the same, so a retry is never charged twice. Every error carries the
request id it was sent under.
``predict_many`` sends many requests over one PredictStream; ``generate`` and ``chat``
stream generated text as ``Chunk``s.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import grpc

from ferryman.sdk.calls import (
    DEFAULT_MAX_TOKENS,
    Metadata,
    build_request,
    call_metadata,
    call_timeout,
    endpoint,
    missing_answer,
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
from ferryman.sdk.generation import Chunk, Message, build_generate, stream
from ferryman.sdk.jobs import Jobs
from ferryman.sdk.prediction import Prediction
from ferryman.sdk.spill import spilled_late
from ferryman.sdk.throttle import throttled
from ferryman.v1 import inference_pb2

__all__ = ["Client", "endpoint"]


class Client(Endpoint):
    """A blocking client for one Ferryman endpoint."""

    def _open_channel(self) -> grpc.Channel:
        self._channel = (
            grpc.secure_channel(self._target, self._credentials, self._options)
            if self._credentials
            else grpc.insecure_channel(self._target, self._options)
        )
        return self._channel

    @property
    def jobs(self) -> Jobs:
        """Durable jobs on this client's channel (``ferryman.sdk.jobs``)."""
        self._check_open()
        return Jobs(self._channel, self._metadata, self._timeout, self.get_model, self._retries)

    def get_model(self, model: str, *, metadata: Metadata | None = None) -> inference_pb2.ModelInfo:
        self._check_open()
        try:
            return self._model_info(model, metadata, self._timeout)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None

    def _model_info(
        self, model: str, metadata: Metadata | None, timeout_s: float, ready: bool = False
    ) -> inference_pb2.ModelInfo:
        """The model's schema, asked once per client (gRPC's own errors come out as they are);
        ``ready``: wait for the channel to connect (gRPC's wait_for_ready)."""
        if model not in self._models:
            self._models[model] = self._stub.GetModel(
                inference_pb2.GetModelRequest(model=model),
                metadata=call_metadata(self._metadata, metadata),
                timeout=timeout_s,
                wait_for_ready=ready,
            )
        return self._models[model]

    def list_models(self, *, metadata: Metadata | None = None) -> list[inference_pb2.ModelInfo]:
        self._check_open()
        try:
            response = self._stub.ListModels(
                inference_pb2.ListModelsRequest(),
                metadata=call_metadata(self._metadata, metadata),
                timeout=self._timeout,
            )
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None
        return list(response.models)

    def feedback(
        self, request_id: str, metric: str, value: float = 1.0, *, metadata: Metadata | None = None
    ) -> inference_pb2.FeedbackResponse:
        """Report an outcome (a click, a conversion, a rating) of an answered request, recorded
        against the version that served it; once per metric and request."""
        self._check_open()
        try:
            response: inference_pb2.FeedbackResponse = self._stub.Feedback(
                inference_pb2.FeedbackRequest(request_id=request_id, metric=metric, value=value),
                metadata=call_metadata(self._metadata, metadata),
                timeout=self._timeout,
            )
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None
        return response

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
        metadata: Metadata | None = None,
        spill_to_job: bool = False,
    ) -> Prediction:
        """Run ``inputs`` (numpy arrays, torch tensors, lists or strings) through ``model``.

        ``timeout``: seconds for the whole call, retries included (0: fail at once);
        ``metadata``: extra call metadata, e.g. an OpenTelemetry ``traceparent``;
        ``spill_to_job``: refused for load, the request becomes a durable job instead
        (``AcceptedAsJob`` carries its id: ``jobs.results(job_id)`` answers it later)."""
        self._check_open()
        deadline = time.monotonic() + call_timeout(timeout, self._timeout)
        # The id is chosen first: every error, the schema lookup's included, carries it.
        rid = request_id or uuid.uuid4().hex
        request: inference_pb2.PredictRequest | None = None
        refreshed = False
        down: FerrymanError | None = None
        """The router was unreachable: attempts wait for the channel to connect."""
        call = call_metadata(self._metadata, metadata)
        try:
            for attempt in range(self._retries + 1):
                remaining = deadline - time.monotonic()
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
                                self._model_info(model, metadata, remaining, down is not None)
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
                        response = self._stub.Predict(
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
                time.sleep(retry_or_raise(error, attempt, self._retries, time.monotonic(), deadline))
        except DeadlineExceeded as late:
            if request is None:
                raise  # the schema was never had: nothing was sent to spill
            raise spilled_late(self._channel, request, late, tuple(call)) from None
        raise AssertionError("unreachable")

    def predict_many(
        self,
        model: str,
        inputs: Sequence[Any],
        *,
        timeout: float | None = None,
        metadata: Metadata | None = None,
        **options: Any,
    ) -> list[Prediction | FerrymanError]:
        """Send one request per element of ``inputs`` over one PredictStream; each answer,
        or its error, in order. ``options`` as for ``predict`` (user, priority, version,
        parameters); nothing is retried."""
        self._check_open()
        info = self.get_model(model, metadata=metadata) if any(map(needs_schema, inputs)) else None
        requests = [
            build_request(model, one, info, request_id=None, **stream_options(options)) for one in inputs
        ]
        try:
            replies = self._stub.PredictStream(
                iter(requests),
                metadata=call_metadata(self._metadata, metadata),
                timeout=call_timeout(timeout, self._timeout),
            )
            answers = {reply.request_id: stream_answer(reply) for reply in replies}
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None
        return [answers.get(r.request_id) or missing_answer(r.request_id) for r in requests]

    def generate(
        self,
        model: str,
        prompt: str,
        *,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        timeout: float | None = None,
        metadata: Metadata | None = None,
        **options: Any,
    ) -> Iterator[Chunk]:
        """Stream text generated from ``prompt`` as ``Chunk``s; the last one has the
        finish reason and usage. ``options``: temperature, top_p, top_k, seed, stop, user,
        priority, version, request_id, json_object, json_schema (structured output: see
        ``build_generate``). Leaving the loop early stops the generation."""
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
    ) -> Iterator[Chunk]:
        """``generate`` for chat ``messages`` (``{"role": ..., "content": ...}``), rendered
        with the model's chat template."""
        return self._stream(
            build_generate(model, messages=messages, max_tokens=max_tokens, **options), timeout, metadata
        )

    def _stream(
        self, request: inference_pb2.GenerateRequest, timeout: float | None, metadata: Metadata | None
    ) -> Iterator[Chunk]:
        self._check_open()
        deadline = time.monotonic() + call_timeout(timeout, self._timeout)
        return stream(self._stub, request, call_metadata(self._metadata, metadata), deadline, self._retries)

    def close(self) -> None:
        self._closed = True
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
