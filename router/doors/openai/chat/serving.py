"""OpenAI-compatible generation over the gateway's ``generate``: whole answers, or
server-sent events (``stream: true``) ending in ``data: [DONE]``. A refusal before the first
token is an HTTP error in OpenAI's shape; a client that disconnects mid-stream ends the
generation and pays for what it was sent."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import grpc
import orjson
from fastapi import Response
from fastapi.responses import StreamingResponse

from ferryman.errors import Reason
from ferryman.v1 import common_pb2, inference_pb2
from ferryman_server.router.doors.http.caller import JSON, Caller
from ferryman_server.router.doors.openai.chat.protocol import (
    DEFAULT_MAX_TOKENS,
    ChatRequest,
    CompletionRequest,
    ResponseFormat,
)
from ferryman_server.router.failures import fail, invalid
from ferryman_server.router.generation import MAX_STOPS
from ferryman_server.router.spans import Door

OPENAI_FINISH = {"stop": "stop", "length": "length", "quota": "length"}

"""Ferryman's finish reasons in OpenAI's words: a token budget cut is a length limit. The
others (cancelled, deadline, error) keep their own names."""

SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


def stops(value: str | list[str] | None) -> list[str]:
    found = [value] if isinstance(value, str) else list(value or [])
    if len(found) > MAX_STOPS:
        raise fail(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"stop: at most {MAX_STOPS} strings",
            Reason.INVALID_REQUEST,
            violations=[("stop", f"more than {MAX_STOPS} strings")],
        )
    return found


def refuse_unserved(request: ChatRequest | CompletionRequest) -> None:
    """What Ferryman does not serve is refused, never ignored: an ignored option would change
    what the caller gets without telling it."""
    if request.n != 1:
        raise invalid("n", "only one choice per request (n = 1) is served")
    if request.logprobs or request.top_logprobs:
        raise invalid("logprobs", "log probabilities are not served")
    if request.tools or request.functions:
        raise invalid("tools", "tools and function calling are not served")


def structured(response_format: ResponseFormat | None, sampling: common_pb2.SamplingParams) -> None:
    """JSON mode or a JSON schema, as the sampling's constraint (the node decodes under it)."""
    if response_format is None or response_format.type == "text":
        return
    if response_format.type == "json_object":
        sampling.json_object = True
        return
    if response_format.json_schema is None:
        raise invalid("response_format.json_schema", "json_schema needs its json_schema object")
    schema = response_format.json_schema.schema_
    if schema is None:  # a named format with no schema: any JSON object
        sampling.json_object = True
    else:
        sampling.json_schema = orjson.dumps(schema).decode()


def neutral(request: ChatRequest | CompletionRequest, request_id: str) -> inference_pb2.GenerateRequest:
    """The gateway's GenerateRequest for an OpenAI request (a developer turn is a system turn)."""
    refuse_unserved(request)
    neutral = inference_pb2.GenerateRequest(
        request_id=request_id,
        model=request.model,
        max_tokens=request.max_completion_tokens or request.max_tokens or DEFAULT_MAX_TOKENS,
        sampling=common_pb2.SamplingParams(temperature=request.temperature, top_p=request.top_p),
        stop=stops(request.stop),
        user=request.user,
    )
    if request.seed is not None:
        neutral.sampling.seed = request.seed
    structured(request.response_format, neutral.sampling)
    if isinstance(request, ChatRequest):
        for turn in request.messages:
            text = turn.content if isinstance(turn.content, str) else "".join(p.text for p in turn.content)
            role = "system" if turn.role == "developer" else turn.role
            neutral.messages.append(common_pb2.ChatMessage(role=role, content=text))
    else:
        neutral.prompt = request.prompt
    return neutral


def finish(answer: inference_pb2.GenerateResponse) -> str | None:
    if not answer.finish_reason:
        return None
    name = common_pb2.FinishReason.Name(answer.finish_reason).removeprefix("FINISH_REASON_").lower()
    return OPENAI_FINISH.get(name, name)


def usage(answer: inference_pb2.GenerateResponse) -> dict[str, int]:
    prompt, completion = answer.usage.input_tokens, answer.usage.output_tokens
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def headers(answer: inference_pb2.GenerateResponse) -> dict[str, str]:
    return {
        "x-request-id": answer.request_id,
        "x-ferryman-model": answer.model,
        "x-ferryman-version": answer.version,
    }


class Shape:
    """How one endpoint words its answers: a chat's messages and deltas, or a completion's text."""

    def __init__(self, chat: bool, request_id: str, model: str) -> None:
        self.chat = chat
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{request_id}"
        self.model = model
        self.created = int(time.time())

    def _envelope(self, kind: str, choice: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": kind,
            "created": self.created,
            "model": self.model,
            "choices": [choice],
        }

    def whole(self, text: str, last: inference_pb2.GenerateResponse) -> dict[str, Any]:
        if self.chat:
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish(last),
            }
            body = self._envelope("chat.completion", choice)
        else:
            choice = {"index": 0, "text": text, "finish_reason": finish(last), "logprobs": None}
            body = self._envelope("text_completion", choice)
        return {**body, "usage": usage(last)}

    def chunk(self, answer: inference_pb2.GenerateResponse, first: bool) -> dict[str, Any]:
        if self.chat:
            delta: dict[str, Any] = {"content": answer.text}
            if first:
                delta["role"] = "assistant"
            return self._envelope(
                "chat.completion.chunk", {"index": 0, "delta": delta, "finish_reason": finish(answer)}
            )
        return self._envelope(
            "text_completion",
            {"index": 0, "text": answer.text, "finish_reason": finish(answer), "logprobs": None},
        )

    def usage_chunk(self, last: inference_pb2.GenerateResponse) -> dict[str, Any]:
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        return {
            "id": self.id,
            "object": kind,
            "created": self.created,
            "model": self.model,
            "choices": [],
            "usage": usage(last),
        }


def event(body: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(body) + b"\n\n"


async def serve(
    caller: Caller, request: ChatRequest | CompletionRequest, request_id: str, door: Door
) -> Response:
    gateway = caller.gateway
    answers = gateway.generate(
        neutral(request, request_id), caller.tenant, caller.deadline(), caller.parent, door
    )
    try:
        first = await caller.unless_gone(anext(answers))
    except BaseException:
        await answers.aclose()
        raise
    shape = Shape(isinstance(request, ChatRequest), first.request_id, first.model)
    if not request.stream:
        try:
            last, text = first, [first.text]
            async for answer in answers:
                last = answer
                text.append(answer.text)
        finally:
            await answers.aclose()
        return JSON(shape.whole("".join(text), last), headers=headers(first))
    include_usage = bool(request.stream_options and request.stream_options.include_usage)
    return StreamingResponse(
        events(shape, first, answers, include_usage),
        media_type="text/event-stream",
        headers={**headers(first), **SSE_HEADERS},
    )


async def events(
    shape: Shape,
    first: inference_pb2.GenerateResponse,
    rest: AsyncGenerator[inference_pb2.GenerateResponse],
    include_usage: bool,
) -> AsyncIterator[bytes]:
    """The stream's events; a client that leaves closes this, which closes the generation."""
    try:
        yield event(shape.chunk(first, first=True))
        last = first
        async for answer in rest:
            last = answer
            yield event(shape.chunk(answer, first=False))
        if include_usage:
            yield event(shape.usage_chunk(last))
        yield b"data: [DONE]\n\n"
    finally:
        await rest.aclose()
