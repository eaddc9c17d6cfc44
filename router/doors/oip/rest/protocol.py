"""The Open Inference Protocol v2 REST bodies, as pydantic models, and the binary extension's names."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from ferryman_server.router.bounds import MAX_INPUTS, MAX_NAME_CHARS, MAX_PARAMETERS, MAX_REQUEST_ID_CHARS

HEADER_LENGTH = "Inference-Header-Content-Length"

MAX_DIMS = 8

BINARY_SIZE = "binary_data_size"


Scalar = bool | int | float | str
Parameters = Annotated[dict[str, Scalar], Field(max_length=MAX_PARAMETERS)]


class InputTensor(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str = Field(max_length=MAX_NAME_CHARS)
    shape: list[int] = Field(max_length=MAX_DIMS)
    datatype: str = Field(max_length=MAX_NAME_CHARS)
    parameters: Parameters = Field(default_factory=dict)
    data: list[Any] | None = Field(default=None, description="Elements, flat or nested, row-major.")


class RequestedOutput(BaseModel):
    name: str = Field(max_length=MAX_NAME_CHARS)
    parameters: Parameters = Field(default_factory=dict)


class InferenceRequest(BaseModel):
    """An inference request; with the binary extension, the JSON part of the body."""

    id: str = Field(default="", max_length=MAX_REQUEST_ID_CHARS)
    parameters: Parameters = Field(default_factory=dict)
    inputs: list[InputTensor] = Field(min_length=1, max_length=MAX_INPUTS)
    outputs: list[RequestedOutput] = Field(default_factory=list, max_length=MAX_INPUTS)


class OutputTensor(BaseModel):
    name: str
    shape: list[int]
    datatype: str
    parameters: dict[str, Scalar] = Field(default_factory=dict)
    data: list[Any] | None = None


class InferenceResponse(BaseModel):
    model_name: str
    model_version: str
    id: str
    parameters: dict[str, Scalar]
    outputs: list[OutputTensor]
