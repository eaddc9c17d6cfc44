"""OpenAI's ``/v1/embeddings`` request and answer, as pydantic models."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from ferryman_server.router.bounds import MAX_NAME_CHARS, MAX_USER_CHARS


class EmbeddingRequest(BaseModel):
    model: str = Field(max_length=MAX_NAME_CHARS)
    input: str | list[str] | list[int] | list[list[int]] = Field(
        description=(
            "Text, a list of texts, or token arrays: cl100k_base ids (what OpenAI clients send for a "
            "model tiktoken does not know), read back into text for the model's own tokenizer."
        )
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
