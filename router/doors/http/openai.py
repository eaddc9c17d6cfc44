"""The OpenAI-compatible API (``/v1/models``, ``/v1/embeddings``) over the gateway: a
model's text input and its output tensor become the request's ``input`` and each
answer's ``embedding``. Errors take OpenAI's shape (router/doors/http/errors.py)."""

from __future__ import annotations

import base64
from typing import Annotated, Any, Literal

import grpc
import numpy as np
from fastapi import APIRouter, Header, Response
from pydantic import BaseModel, Field

from ferryman.errors import Reason
from ferryman.tensors import decode
from ferryman.v1 import common_pb2, inference_pb2
from router.bounds import MAX_NAME_CHARS, MAX_REQUEST_ID_CHARS, MAX_USER_CHARS
from router.doors.http.caller import JSON, Authenticated, answer_headers, json_body, parse_json, read_body
from router.doors.oip.tensors import MAX_TEXT_ELEMENTS
from router.failures import fail
from router.spans import Protocol, http_door

router = APIRouter(prefix="/v1", tags=["OpenAI-compatible"])
EMBEDDINGS = http_door(Protocol.OPENAI, "POST", "/v1/embeddings", **{"gen_ai.operation.name": "embeddings"})
OWNER = "ferryman"


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = 0
    owned_by: str = OWNER


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class EmbeddingRequest(BaseModel):
    model: str = Field(max_length=MAX_NAME_CHARS)
    input: str | list[str] | list[int] | list[list[int]] = Field(
        description="Text, or a list of texts (token arrays are refused: Ferryman tokenizes)."
    )
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, gt=0)
    user: str = Field(default="", max_length=MAX_USER_CHARS)


class Embedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str


class EmbeddingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingList(BaseModel):
    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage


@router.get("/models", summary="The models this key may call.")
async def list_models(caller: Authenticated) -> ModelList:
    models = caller.gateway.catalog.list_models(caller.tenant).models
    return ModelList(data=[ModelCard(id=m.name) for m in models])


@router.get("/models/{model}", summary="One model.")
async def get_model(caller: Authenticated, model: str) -> ModelCard:
    return ModelCard(id=caller.gateway.catalog.get_model(caller.tenant, model).name)


def invalid(field: str, description: str) -> Exception:
    return fail(
        grpc.StatusCode.INVALID_ARGUMENT,
        f"{field}: {description}",
        Reason.INVALID_REQUEST,
        violations=[(field, description)],
    )


def texts(request: EmbeddingRequest) -> list[str]:
    value = request.input
    if isinstance(value, str):
        return [value]
    if not value:
        raise invalid("input", "at least one text")
    if not all(isinstance(v, str) for v in value):
        raise invalid("input", "token arrays are not supported: send text")
    if len(value) > MAX_TEXT_ELEMENTS:
        raise invalid("input", f"more than {MAX_TEXT_ELEMENTS} texts")
    return [str(v) for v in value]


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
    text_inputs = [spec for spec in schema.inputs if spec.text]
    if len(schema.inputs) != 1 or not text_inputs or len(schema.outputs) != 1:
        raise invalid("model", f"{request.model} is not an embedding model (one text input, one output)")
    output_spec = schema.outputs[0]
    if request.dimensions is not None and tuple(output_spec.shape) != (request.dimensions,):
        raise invalid(
            "dimensions", f"{request.model} answers {list(output_spec.shape)}, not {request.dimensions}"
        )
    neutral = inference_pb2.PredictRequest(
        request_id=idempotency_key,
        model=request.model,
        user=request.user,
        inputs=[
            common_pb2.NamedTensor(name=text_inputs[0].name, text=common_pb2.TextList(values=texts(request)))
        ],
    )
    response = await caller.unless_gone(
        gateway.predict(neutral, caller.tenant, caller.deadline(), caller.parent, EMBEDDINGS)
    )
    rows = decode(response.outputs[0].tensor).astype("<f4").reshape(response.usage.items, -1)
    encoded: list[Any] = (
        [base64.b64encode(np.ascontiguousarray(row).tobytes()).decode() for row in rows]
        if request.encoding_format == "base64"
        else rows.tolist()
    )
    tokens = response.usage.input_tokens
    # Rendered as is: the answer is built to EmbeddingList's shape, and validating
    # hundreds of floats per text again would cost more than the rendering.
    return JSON(
        {
            "object": "list",
            "data": [{"object": "embedding", "index": i, "embedding": e} for i, e in enumerate(encoded)],
            "model": response.model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        },
        headers=answer_headers(response),
    )
