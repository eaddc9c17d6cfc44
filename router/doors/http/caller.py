"""What every HTTP route needs of its request: the caller's tenant (bearer key), deadline
and trace context, a JSON response class, and cancellation when the client leaves."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Mapping, Sequence
from typing import Annotated, Any, TypeVar

import grpc
import orjson
from fastapi import Depends, Request, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from opentelemetry.context import Context
from pydantic import BaseModel, ValidationError

from ferryman.errors import Reason
from ferryman.v1 import inference_pb2
from ferryman_server.kernel.telemetry import context_from_metadata
from ferryman_server.registry.snapshot import TenantRecord
from ferryman_server.router.failures import RequestFailed, fail
from ferryman_server.router.gateway import Gateway
from ferryman_server.router.spans import Protocol

T = TypeVar("T")
OPENAI_PREFIX = "/v1/"
"""Paths of the OpenAI-compatible door (the rest of the HTTP port is OIP REST)."""
MAX_VIOLATIONS = 16
"""Validation problems named in one refusal."""
BEARER = HTTPBearer(auto_error=False, description="A tenant API key: `Authorization: Bearer <key>`.")


class JSON(Response):
    """JSON rendered by orjson (numpy-free lists of floats render several times faster)."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


class Caller:
    """What every HTTP route needs of its request: the tenant, deadline and trace context."""

    def __init__(self, gateway: Gateway, request: Request, credentials: HTTPAuthorizationCredentials | None):
        self.gateway = gateway
        self.request = request
        self.protocol = Protocol.OPENAI if request.url.path.startswith(OPENAI_PREFIX) else Protocol.OIP_REST
        key = credentials.credentials if credentials else None
        self.tenant: TenantRecord = gateway.tenant(key, self.protocol)

    @property
    def parent(self) -> Context:
        return context_from_metadata(self.request.headers.items())

    def deadline(self) -> float:
        return self.gateway.deadline(None)

    async def unless_gone(self, work: Awaitable[T]) -> T:
        """``work``'s result, or its cancellation when the client disconnects first: a
        cancelled request releases its quota like a cancelled gRPC call."""
        task = asyncio.ensure_future(work)
        watcher = asyncio.ensure_future(disconnected(self.request))
        try:
            await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watcher.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, RequestFailed):
                await task
            raise fail_gone()
        return task.result()


def fail_gone() -> RequestFailed:
    return fail(grpc.StatusCode.CANCELLED, "the client disconnected", Reason.CANCELLED)


async def disconnected(request: Request) -> None:
    """Return once the client has gone (after the body is read, receive() waits for that)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def invalid_request(problems: Sequence[Mapping[str, Any]], skip: int = 0) -> RequestFailed:
    """INVALID_ARGUMENT naming each field pydantic refused (``skip``: leading ``loc`` parts
    that are not fields, such as FastAPI's "body")."""
    bad = [
        (".".join(str(p) for p in problem["loc"][skip:]) or "body", str(problem["msg"]))
        for problem in problems[:MAX_VIOLATIONS]
    ]
    return fail(
        grpc.StatusCode.INVALID_ARGUMENT,
        "; ".join(f"{f}: {d}" for f, d in bad),
        Reason.INVALID_REQUEST,
        violations=bad,
    )


async def read_body(request: Request, limit: int) -> bytes:
    """The request body; INVALID_ARGUMENT (400) as soon as it passes ``limit`` bytes, so an
    endless body is never buffered."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large(limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def too_large(limit: int) -> RequestFailed:
    return fail(
        grpc.StatusCode.INVALID_ARGUMENT,
        f"the request body is larger than {limit} bytes",
        Reason.INVALID_REQUEST,
        violations=[("body", f"larger than {limit} bytes")],
    )


M = TypeVar("M", bound=BaseModel)


def parse_json(model: type[M], body: bytes) -> M:
    """A body read by ``read_body`` as ``model``: JSON whatever its Content-Type (``curl -d``
    sends a form type), every problem a named field."""
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        raise invalid_request(exc.errors()) from None


def json_body(schema: str) -> dict[str, Any]:
    """OpenAPI for a route that reads its body itself: a JSON body of ``schema``, which the
    app adds to the document's components (router/doors/http/server.py)."""
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}},
        }
    }


def answer_headers(response: inference_pb2.PredictResponse) -> dict[str, str]:
    """What every HTTP answer says of itself beside its body: which request and version it
    is (the OpenAI body has no place for either), and whether it was shared."""
    return {
        "x-request-id": response.request_id,
        "x-ferryman-model": response.model,
        "x-ferryman-version": response.version,
        "x-ferryman-coalesced": str(response.coalesced).lower(),
    }


def gateway_of(request: Request) -> Gateway:
    gateway: Gateway = request.app.state.gateway
    return gateway


async def caller(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)]
) -> Caller:
    """The dependency of every authenticated route (UNAUTHENTICATED -> 401)."""
    return Caller(gateway_of(request), request, credentials)


Authenticated = Annotated[Caller, Depends(caller)]
