"""The Open Inference Protocol v2 over HTTP/REST (``/v2/...``), JSON tensors and the binary
tensor extension (``Inference-Header-Content-Length``): converts to the gateway and back.
Health and server metadata need no key; everything about models does."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Request, Response
from google.protobuf.message import Message
from pydantic import BaseModel, ConfigDict, Field

from ferryman.v1 import common_pb2, inference_pb2
from router.bounds import MAX_INPUTS, MAX_NAME_CHARS, MAX_PARAMETERS, MAX_REQUEST_ID_CHARS
from router.doors.http.caller import (
    JSON,
    Authenticated,
    answer_headers,
    gateway_of,
    json_body,
    parse_json,
    read_body,
)
from router.doors.oip import convert
from router.doors.oip.servicer import SERVER_VERSION
from router.doors.oip.tensors import (
    TensorProblem,
    datatype,
    from_raw,
    from_values,
    json_data,
    raw_contents,
    select_outputs,
    shape,
)
from router.spans import Protocol, http_door

router = APIRouter(prefix="/v2", tags=["Open Inference Protocol v2"])
INFER = http_door(Protocol.OIP_REST, "POST", "/v2/models/{model}/infer")
INFER_VERSION = http_door(Protocol.OIP_REST, "POST", "/v2/models/{model}/versions/{version}/infer")
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


def plain(message: Message) -> dict[str, Any]:
    """A protobuf message as JSON with every field, numbers as numbers (json_format would
    write 64-bit integers as strings) and enums by name."""

    def value(field: Any, item: Any) -> Any:
        if field.message_type is not None:
            return plain(item)
        if field.enum_type is not None:
            return field.enum_type.values_by_number[item].name
        return item

    out: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        item = getattr(message, field.name)
        out[field.name] = [value(field, i) for i in item] if field.is_repeated else value(field, item)
    return out


@router.get("/health/live", summary="The server is up.")
async def live() -> dict[str, bool]:
    return {"live": True}


@router.get("/health/ready", summary="The server takes requests.", responses={503: {}})
async def ready(request: Request) -> Response:
    serving = gateway_of(request).serving
    return JSON({"ready": serving}, status_code=200 if serving else 503)


@router.get("", summary="Server metadata.")
async def server_metadata() -> dict[str, Any]:
    return {"name": convert.SERVER_NAME, "version": SERVER_VERSION, "extensions": list(convert.EXTENSIONS)}


# Registered before /models/{model}: routes match in order, and "stats" would be a model name.
@router.get("/models/stats", summary="Triton's statistics of every model, from this tenant's requests.")
@router.get("/models/{model}/stats", summary="Triton's statistics, from this tenant's requests.")
@router.get("/models/{model}/versions/{version}/stats", summary="Triton's statistics of one version.")
async def model_stats(caller: Authenticated, model: str = "", version: str = "") -> dict[str, Any]:
    gateway = caller.gateway
    models = [model] if model else [m.name for m in gateway.catalog.list_models(caller.tenant).models]
    entries = [
        plain(entry)
        for name in models
        for entry in convert.statistics(name, gateway.statistics(caller.tenant, name), version).model_stats
    ]
    return {"model_stats": entries}


@router.get("/models/{model}", summary="A model's versions and the inputs and outputs of one.")
@router.get("/models/{model}/versions/{version}", summary="A version's inputs and outputs.")
async def model_metadata(caller: Authenticated, model: str, version: str = "") -> dict[str, Any]:
    gateway = caller.gateway
    info = gateway.catalog.get_model(caller.tenant, model)
    return plain(convert.metadata(info, gateway.catalog.version(caller.tenant, model, version)))


@router.get("/models/{model}/ready", summary="200 when a replica serves the model, else 400.")
@router.get("/models/{model}/versions/{version}/ready", summary="200 when a replica serves the version.")
async def model_ready(caller: Authenticated, model: str, version: str = "") -> Response:
    is_ready = caller.gateway.catalog.ready(caller.tenant, model, version)
    return JSON({"name": model, "ready": is_ready}, status_code=200 if is_ready else 400)


@router.get("/models/{model}/config", summary="Triton's model configuration.")
@router.get("/models/{model}/versions/{version}/config", summary="Triton's model configuration.")
async def model_config(caller: Authenticated, model: str, version: str = "") -> dict[str, Any]:
    return plain(convert.config(caller.gateway.catalog.version(caller.tenant, model, version)))


def parse(body: bytes, header_length: int | None) -> tuple[InferenceRequest, list[common_pb2.NamedTensor]]:
    """The request's JSON and its inputs, from JSON data or the binary section."""
    split = len(body) if header_length is None else header_length
    if not 0 <= split <= len(body):
        raise TensorProblem(HEADER_LENGTH, f"{split} is not within the body's {len(body)} bytes")
    request = parse_json(InferenceRequest, body[:split])
    binary, offset = memoryview(body)[split:], 0
    inputs = []
    for i, tensor in enumerate(request.inputs):
        field = f"inputs[{i}]"
        size = tensor.parameters.get(BINARY_SIZE)
        if size is None:
            inputs.append(
                from_values(tensor.name, tensor.datatype, tensor.shape, tensor.data, f"{field}.data")
            )
            continue
        if isinstance(size, bool) or not isinstance(size, int) or size < 0 or offset + size > len(binary):
            raise TensorProblem(f"{field}.parameters.{BINARY_SIZE}", "does not fit the binary data sent")
        raw = bytes(binary[offset : offset + size])
        offset += size
        inputs.append(from_raw(tensor.name, tensor.datatype, tensor.shape, raw, field))
    if offset != len(binary):
        raise TensorProblem("body", f"{len(binary) - offset} bytes of binary data belong to no input")
    return request, inputs


def answer(request: InferenceRequest, response: inference_pb2.PredictResponse) -> Response:
    """JSON, or JSON + binary outputs where the request asked for them."""
    binary_all = request.parameters.get("binary_data_output") is True
    binary_of = {o.name: o.parameters.get("binary_data", binary_all) is True for o in request.outputs}
    outputs, parts = [], []
    for output in select_outputs(response.outputs, [o.name for o in request.outputs]):
        described: dict[str, Any] = {
            "name": output.name,
            "datatype": datatype(output),
            "shape": shape(output),
        }
        if binary_of.get(output.name, binary_all):
            raw = raw_contents(output)
            described["parameters"] = {BINARY_SIZE: len(raw)}
            parts.append(raw)
        else:
            described["data"] = json_data(output)
        outputs.append(described)
    body = {
        "model_name": response.model,
        "model_version": response.version,
        "id": response.request_id,
        "parameters": convert.usage_parameters(response),
        "outputs": outputs,
    }
    if not parts:
        return JSON(body, headers=answer_headers(response))
    header = JSON(body).body
    return Response(
        b"".join([header, *parts]),
        media_type="application/octet-stream",
        headers={HEADER_LENGTH: str(len(header)), **answer_headers(response)},
    )


INFER_BODY = json_body("InferenceRequest")
INFER_BODY["requestBody"]["content"]["application/octet-stream"] = {
    "schema": {"type": "string", "format": "binary"},
    "description": f"The binary tensor extension: {HEADER_LENGTH} bytes of JSON, then the inputs' data.",
}
"""The infer routes read their body themselves (JSON or binary); this documents it."""


@router.post(
    "/models/{model}/infer",
    summary="Run one request (JSON, or JSON + binary tensors).",
    response_model=InferenceResponse,
    openapi_extra=INFER_BODY,
)
@router.post(
    "/models/{model}/versions/{version}/infer",
    summary="Run one request on a version.",
    response_model=InferenceResponse,
    openapi_extra=INFER_BODY,
)
async def infer(
    caller: Authenticated,
    model: str,
    version: str = "",
    header_length: Annotated[int | None, Header(alias=HEADER_LENGTH)] = None,
) -> Response:
    gateway = caller.gateway
    body = await read_body(caller.request, gateway.max_message_bytes)
    try:
        request, inputs = parse(body, header_length)
        if request.outputs:
            convert.check_outputs(
                gateway.catalog.get_model(caller.tenant, model), [o.name for o in request.outputs]
            )
        neutral = convert.predict_request(model, version, request.id, request.parameters, inputs)
        response = await caller.unless_gone(
            gateway.predict(
                neutral, caller.tenant, caller.deadline(), caller.parent, INFER_VERSION if version else INFER
            )
        )
        return answer(request, response)
    except TensorProblem as problem:
        raise convert.problem_failure(problem) from None
