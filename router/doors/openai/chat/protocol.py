"""OpenAI's ``/v1/chat/completions`` and ``/v1/completions`` requests, as pydantic models."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from ferryman_server.router.bounds import MAX_NAME_CHARS, MAX_USER_CHARS
from ferryman_server.router.generation import MAX_MESSAGES, MAX_TEMPERATURE

DEFAULT_MAX_TOKENS = 256

"""What OpenAI's ``max_tokens`` defaults to here (it has no default there but the context)."""


class TextPart(BaseModel):
    type: Literal["text"]
    text: str


class ChatTurn(BaseModel):
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart]


class StreamOptions(BaseModel):
    include_usage: bool = False


class JsonSchemaFormat(BaseModel):
    """OpenAI's ``response_format.json_schema``: only its ``schema`` is read (``name``,
    ``description`` and ``strict`` change nothing: the answer is decoded under the schema's
    grammar, so it always validates)."""

    schema_: dict[str, Any] | None = Field(default=None, alias="schema")


class ResponseFormat(BaseModel):
    """OpenAI's ``response_format``: plain text, JSON mode, or a JSON schema."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class Sampled(BaseModel):
    """What both endpoints take besides their prompt."""

    model: str = Field(max_length=MAX_NAME_CHARS)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0, le=MAX_TEMPERATURE)
    top_p: float = Field(default=1.0, gt=0, le=1)
    seed: int | None = None
    stop: str | list[str] | None = Field(default=None)
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str = Field(default="", max_length=MAX_USER_CHARS)
    n: int = Field(default=1, ge=1)
    """Only 1 is served; more is refused (400), never ignored."""
    response_format: ResponseFormat | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    tools: list[Any] | None = None
    functions: list[Any] | None = None
    """``logprobs``, ``tools`` and ``functions`` are refused (400) when asked for, never ignored."""


class ChatRequest(Sampled):
    messages: list[ChatTurn] = Field(min_length=1, max_length=MAX_MESSAGES)


class CompletionRequest(Sampled):
    prompt: str = Field(min_length=1)
