"""The Open Inference Protocol v2 REST routes (``/v2``): health, metadata, statistics, infer."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Request, Response

from ferryman_server.router.doors.http.caller import (
    JSON,
    Authenticated,
    gateway_of,
    json_body,
    read_body,
)
from ferryman_server.router.doors.http.spans import http_door
from ferryman_server.router.doors.oip import convert
from ferryman_server.router.doors.oip.rest.protocol import HEADER_LENGTH, InferenceResponse
from ferryman_server.router.doors.oip.rest.serving import answer, parse, plain
from ferryman_server.router.doors.oip.servicer import SERVER_VERSION
from ferryman_server.router.doors.oip.tensors import (
    TensorProblem,
)
from ferryman_server.router.spans import Protocol

router = APIRouter(prefix="/v2", tags=["Open Inference Protocol v2"])

INFER = http_door(Protocol.OIP_REST, "POST", "/v2/models/{model}/infer")

INFER_VERSION = http_door(Protocol.OIP_REST, "POST", "/v2/models/{model}/versions/{version}/infer")


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
