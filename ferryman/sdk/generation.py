"""Text generation in the SDK: building a ``GenerateRequest``, the chunks a stream yields,
and the streaming call with retries (blocking and asyncio).

A generation is retried only before its first chunk (the router refused or could not
reach a node; nothing ran or was charged), under the same request id. Once text flows, a
failure ends the stream with a finish reason instead of an error."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from ferryman.sdk.calls import out_of_time, priority_level, renamed, retry_or_raise, tagged
from ferryman.sdk.errors import from_rpc_error
from ferryman.sdk.prediction import Timing, Usage
from ferryman.v1 import common_pb2, inference_pb2, inference_pb2_grpc

Message = Mapping[str, str]
"""A chat turn: ``{"role": "system" | "user" | "assistant", "content": "..."}``."""


@dataclass(frozen=True)
class Chunk:
    """A piece of a streamed generation; the last one has ``finish_reason`` and ``usage``."""

    request_id: str
    text: str
    token_ids: tuple[int, ...]
    model: str
    version: str
    finish_reason: str | None
    """"stop", "length", "cancelled", "quota", "deadline" or "error" on the last chunk."""
    usage: Usage | None
    timing: Timing | None

    @classmethod
    def from_proto(cls, response: inference_pb2.GenerateResponse) -> Chunk:
        last = bool(response.finish_reason)

        def ms(d: Any) -> float:
            return float(d.ToNanoseconds()) / 1e6

        u, t = response.usage, response.timing
        return cls(
            request_id=response.request_id,
            text=response.text,
            token_ids=tuple(response.token_ids),
            model=response.model,
            version=response.version,
            finish_reason=finish_name(response.finish_reason) if last else None,
            usage=Usage(u.items, u.input_tokens, u.output_tokens, u.cost_usd) if last else None,
            timing=Timing(ms(t.queue), ms(t.compute), ms(t.total), t.batch_size) if last else None,
        )


def finish_name(reason: int) -> str:
    """``FINISH_REASON_QUOTA`` -> ``"quota"``."""
    return common_pb2.FinishReason.Name(reason).removeprefix("FINISH_REASON_").lower()


def build_generate(
    model: str,
    *,
    prompt: str | None = None,
    messages: Sequence[Message] | None = None,
    max_tokens: int,
    temperature: float = 0.0,
    top_p: float = 1.0,
    top_k: int = 0,
    seed: int | None = None,
    stop: Sequence[str] = (),
    user: str | None = None,
    priority: str | int | None = None,
    version: str | None = None,
    request_id: str | None = None,
    json_object: bool = False,
    json_schema: Mapping[str, Any] | str | None = None,
) -> inference_pb2.GenerateRequest:
    """A GenerateRequest for a prompt or chat messages (one of them). ``json_object``: the
    answer is one JSON object; ``json_schema`` (a dict or its JSON text): the answer is JSON
    valid against it. Both are decoded under a grammar, so the answer always parses unless
    ``max_tokens`` cuts it (finish ``length``)."""
    if (prompt is None) == (messages is None):
        raise ValueError("give either a prompt or chat messages")
    if json_object and json_schema is not None:
        raise ValueError("give either json_object or json_schema")
    sampling = common_pb2.SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k)
    if seed is not None:
        sampling.seed = seed
    if json_object:
        sampling.json_object = True
    elif json_schema is not None:
        sampling.json_schema = json_schema if isinstance(json_schema, str) else json.dumps(json_schema)
    return inference_pb2.GenerateRequest(
        request_id=request_id or uuid.uuid4().hex,
        generated_request_id=not request_id,
        model=model,
        version=version or "",
        prompt=prompt or "",
        messages=[common_pb2.ChatMessage(role=m["role"], content=m["content"]) for m in messages or ()],
        max_tokens=max_tokens,
        sampling=sampling,
        stop=list(stop),
        user=user or "",
        priority=priority_level(priority),  # type: ignore[arg-type]
    )


def stream(
    stub: inference_pb2_grpc.InferenceStub,
    request: inference_pb2.GenerateRequest,
    metadata: list[tuple[str, str]],
    deadline: float,
    retries: int,
) -> Iterator[Chunk]:
    """The chunks of one generation by ``deadline`` (time.monotonic); leaving early cancels it."""
    for attempt in range(retries + 1):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise tagged(out_of_time(), request.request_id)
        call = stub.Generate(request, metadata=metadata, timeout=remaining)
        started = False
        try:
            for response in call:
                started = True
                yield Chunk.from_proto(response)
            return
        except grpc.RpcError as exc:
            error = tagged(from_rpc_error(exc), request.request_id)
            if started:
                raise error from None  # chunks were already handed out: not repeated
            if not (attempt < retries and renamed(request, error)):
                time.sleep(retry_or_raise(error, attempt, retries, time.monotonic(), deadline))
        finally:
            call.cancel()


async def stream_async(
    stub: inference_pb2_grpc.InferenceStub,
    request: inference_pb2.GenerateRequest,
    metadata: list[tuple[str, str]],
    deadline: float,
    retries: int,
) -> AsyncIterator[Chunk]:
    """``stream`` on asyncio (``deadline`` in event-loop time)."""
    loop = asyncio.get_running_loop()
    for attempt in range(retries + 1):
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise tagged(out_of_time(), request.request_id)
        call = stub.Generate(request, metadata=metadata, timeout=remaining)
        started = False
        try:
            async for response in call:
                started = True
                yield Chunk.from_proto(response)
            return
        except grpc.RpcError as exc:
            error = tagged(from_rpc_error(exc), request.request_id)
            if started:
                raise error from None  # chunks were already handed out: not repeated
            if not (attempt < retries and renamed(request, error)):
                await asyncio.sleep(retry_or_raise(error, attempt, retries, loop.time(), deadline))
        finally:
            call.cancel()
