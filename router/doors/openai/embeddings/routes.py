"""The ``/v1/embeddings`` route: read the body bounded, convert, call the gateway, answer."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Response

from ferryman_server.router.bounds import MAX_REQUEST_ID_CHARS
from ferryman_server.router.doors.http.caller import (
    JSON,
    Authenticated,
    answer_headers,
    json_body,
    parse_json,
    read_body,
)
from ferryman_server.router.doors.http.spans import http_door
from ferryman_server.router.doors.openai.embeddings.protocol import EmbeddingList, EmbeddingRequest
from ferryman_server.router.doors.openai.embeddings.serving import embedding_list, predict_request
from ferryman_server.router.spans import Protocol

router = APIRouter(prefix="/v1", tags=["OpenAI-compatible"])

EMBEDDINGS = http_door(Protocol.OPENAI, "POST", "/v1/embeddings", **{"gen_ai.operation.name": "embeddings"})


@router.post(
    "/embeddings",
    summary="Embeddings of texts, by a model that takes text.",
    response_model=EmbeddingList,
    openapi_extra=json_body("EmbeddingRequest"),
)
async def embeddings(
    caller: Authenticated,
    idempotency_key: Annotated[str, Header(max_length=MAX_REQUEST_ID_CHARS)] = "",
) -> Response:
    gateway = caller.gateway
    request = parse_json(EmbeddingRequest, await read_body(caller.request, gateway.max_message_bytes))
    schema = gateway.catalog.version(caller.tenant, request.model).schema
    neutral = await predict_request(request, schema, idempotency_key)
    response = await caller.unless_gone(
        gateway.predict(neutral, caller.tenant, caller.deadline(), caller.parent, EMBEDDINGS)
    )
    return JSON(embedding_list(request, response), headers=answer_headers(response))
