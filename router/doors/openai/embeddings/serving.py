"""Conversion between ``/v1/embeddings`` and the gateway's neutral messages: the model's one
text input gets the request's ``input``, its one output becomes each ``embedding``."""

from __future__ import annotations

import asyncio
import base64
from typing import Any, cast

import numpy as np

from ferryman.tensors import decode
from ferryman.v1 import common_pb2, inference_pb2
from ferryman_server.kernel.schema import IOSchema
from ferryman_server.router.doors.oip.tensors import MAX_TEXT_ELEMENTS
from ferryman_server.router.doors.openai.embeddings.protocol import EmbeddingRequest
from ferryman_server.router.doors.openai.embeddings.tokens import TOKEN_TEXT
from ferryman_server.router.failures import invalid


def tokenized(request: EmbeddingRequest) -> bool:
    """Whether ``input`` is token arrays (reading them may load a vocabulary: not on the loop)."""
    return isinstance(request.input, list) and bool(request.input) and not isinstance(request.input[0], str)


def texts(request: EmbeddingRequest) -> list[str]:
    """The texts to embed: given as text, or as token arrays read back into text."""
    value = request.input
    if isinstance(value, str):
        return [value]
    if not value:
        raise invalid("input", "at least one text")
    if all(isinstance(v, int) for v in value):
        return TOKEN_TEXT.texts([cast(list[int], value)])
    if len(value) > MAX_TEXT_ELEMENTS:
        raise invalid("input", f"more than {MAX_TEXT_ELEMENTS} texts")
    if all(isinstance(v, list) for v in value):
        return TOKEN_TEXT.texts(cast(list[list[int]], value))
    return [str(v) for v in value]


async def predict_request(
    request: EmbeddingRequest, schema: IOSchema, request_id: str
) -> inference_pb2.PredictRequest:
    """The neutral request for an embedding model (one text input, one output), or the
    reason the model is none, or does not answer the asked ``dimensions``."""
    text_inputs = [spec for spec in schema.inputs if spec.text]
    if len(schema.inputs) != 1 or not text_inputs or len(schema.outputs) != 1:
        raise invalid("model", f"{request.model} is not an embedding model (one text input, one output)")
    output_spec = schema.outputs[0]
    if request.dimensions is not None and tuple(output_spec.shape) != (request.dimensions,):
        raise invalid(
            "dimensions", f"{request.model} answers {list(output_spec.shape)}, not {request.dimensions}"
        )
    values = await asyncio.to_thread(texts, request) if tokenized(request) else texts(request)
    return inference_pb2.PredictRequest(
        request_id=request_id,
        model=request.model,
        user=request.user,
        inputs=[common_pb2.NamedTensor(name=text_inputs[0].name, text=common_pb2.TextList(values=values))],
    )


def embedding_list(request: EmbeddingRequest, response: inference_pb2.PredictResponse) -> dict[str, Any]:
    """The answer in ``EmbeddingList``'s shape, floats or base64 as asked. Built as a dict:
    validating hundreds of floats per text again would cost more than the rendering."""
    rows = decode(response.outputs[0].tensor).astype("<f4").reshape(response.usage.items, -1)
    encoded: list[Any] = (
        [base64.b64encode(np.ascontiguousarray(row).tobytes()).decode() for row in rows]
        if request.encoding_format == "base64"
        else rows.tolist()
    )
    tokens = response.usage.input_tokens
    return {
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": e} for i, e in enumerate(encoded)],
        "model": response.model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
