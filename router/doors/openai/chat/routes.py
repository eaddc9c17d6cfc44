"""The ``/v1/chat/completions`` and ``/v1/completions`` routes."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Response

from ferryman_server.router.bounds import MAX_REQUEST_ID_CHARS
from ferryman_server.router.doors.http.caller import Authenticated, json_body, parse_json, read_body
from ferryman_server.router.doors.http.spans import http_door
from ferryman_server.router.doors.openai.chat.protocol import ChatRequest, CompletionRequest
from ferryman_server.router.doors.openai.chat.serving import serve
from ferryman_server.router.spans import Protocol

router = APIRouter(prefix="/v1", tags=["OpenAI-compatible"])

CHAT = http_door(Protocol.OPENAI, "POST", "/v1/chat/completions")

COMPLETIONS = http_door(Protocol.OPENAI, "POST", "/v1/completions")


@router.post(
    "/chat/completions",
    summary="Chat with a generative model (stream: true for server-sent events).",
    openapi_extra=json_body("ChatRequest"),
)
async def chat_completions(
    caller: Authenticated,
    idempotency_key: Annotated[str, Header(max_length=MAX_REQUEST_ID_CHARS)] = "",
) -> Response:
    request = parse_json(ChatRequest, await read_body(caller.request, caller.gateway.max_message_bytes))
    return await serve(caller, request, idempotency_key, CHAT)


@router.post(
    "/completions",
    summary="Complete a prompt with a generative model (stream: true for server-sent events).",
    openapi_extra=json_body("CompletionRequest"),
)
async def completions(
    caller: Authenticated,
    idempotency_key: Annotated[str, Header(max_length=MAX_REQUEST_ID_CHARS)] = "",
) -> Response:
    request = parse_json(CompletionRequest, await read_body(caller.request, caller.gateway.max_message_bytes))
    return await serve(caller, request, idempotency_key, COMPLETIONS)
