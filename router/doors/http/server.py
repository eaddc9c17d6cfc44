"""The router's HTTP port: OIP v2 REST (``/v2``) and the OpenAI-compatible API (``/v1``),
one FastAPI app under uvicorn in the router's own event loop, over the same gateway as
the gRPC doors. Failures become each API's error body (router/doors/http/errors.py)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Generator, Sequence
from typing import Any

import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi

from ferryman_server.kernel.connections import ConnectionGuard, GuardLimits
from ferryman_server.kernel.http_guard import guarded
from ferryman_server.kernel.net import cannot_listen
from ferryman_server.kernel.proxies import Network
from ferryman_server.router.doors.http import errors
from ferryman_server.router.doors.http.caller import JSON, OPENAI_PREFIX, invalid_request
from ferryman_server.router.doors.oip.rest import protocol as oip_rest
from ferryman_server.router.doors.oip.rest import routes as oip_rest_routes
from ferryman_server.router.doors.openai import models
from ferryman_server.router.doors.openai.batches import protocol as batches
from ferryman_server.router.doors.openai.batches import routes as batches_routes
from ferryman_server.router.doors.openai.chat import protocol as chat
from ferryman_server.router.doors.openai.chat import routes as chat_routes
from ferryman_server.router.doors.openai.embeddings import protocol as embeddings
from ferryman_server.router.doors.openai.embeddings import routes as embeddings_routes
from ferryman_server.router.failures import RequestFailed
from ferryman_server.router.gateway import Gateway
from ferryman_server.router.jobs import JobDesk

BODIES = (
    oip_rest.InferenceRequest,
    embeddings.EmbeddingRequest,
    chat.ChatRequest,
    batches.BatchRequest,
    chat.CompletionRequest,
)
"""Bodies that routes read themselves (bounded, JSON whatever the Content-Type); the
OpenAPI document gets their schemas here."""
START_TIMEOUT_S = 10.0
START_POLL_S = 0.01


def failure_response(request: Request, status: Any) -> Response:
    body = (
        errors.openai_body(status) if request.url.path.startswith(OPENAI_PREFIX) else errors.oip_body(status)
    )
    return JSON(body, status_code=errors.http_status(status), headers=errors.headers(status))


def build_app(gateway: Gateway, jobs: JobDesk | None = None) -> FastAPI:
    """The HTTP doors' app: every route takes a ``Caller`` built by the ``caller`` dependency;
    ``jobs``: the durable jobs OpenAI's Batch API runs on (None: no batches)."""
    app = FastAPI(
        title="Ferryman",
        summary="Open Inference Protocol v2 REST and an OpenAI-compatible API over Ferryman's router.",
        version="1",
        docs_url=None,  # the Swagger UI loads its assets from a CDN; the document is enough
        redoc_url=None,
        default_response_class=JSON,
        # The gateway makes each request's root span (one per request, whatever the door, by
        # the conventions); FastAPI's own would be a second root beside it.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.state.gateway = gateway
    app.state.jobs = jobs

    @app.exception_handler(RequestFailed)
    async def request_failed(request: Request, exc: RequestFailed) -> Response:
        return failure_response(request, exc.status)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        return failure_response(request, invalid_request(exc.errors(), skip=1).status)

    # What load balancers, vLLM's clients and guidellm probe: 200 while the router takes
    # requests, 503 while it drains (the same answer as OIP's /v2/health/ready).
    app.add_api_route(
        "/health", oip_rest_routes.ready, methods=["GET"], summary="Takes requests (200) or not (503)."
    )
    app.include_router(oip_rest_routes.router)
    app.include_router(models.router)
    app.include_router(embeddings_routes.router)
    app.include_router(chat_routes.router)
    app.include_router(batches_routes.router)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(
                title=app.title, version=app.version, summary=app.summary, routes=app.routes
            )
            schemas = document.setdefault("components", {}).setdefault("schemas", {})
            for model in BODIES:
                body = model.model_json_schema(ref_template="#/components/schemas/{model}")
                schemas.update(body.pop("$defs", {}))
                schemas[model.__name__] = body
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


class _Server(uvicorn.Server):
    """uvicorn without its signal handlers: the router's runtime owns SIGTERM/SIGINT."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None]:
        yield


class HttpDoor:
    """The app served on ``listen`` until ``close``."""

    def __init__(
        self,
        gateway: Gateway,
        listen: str,
        limits: GuardLimits,
        certfile: str = "",
        keyfile: str = "",
        reuse_port: bool = False,
        jobs: JobDesk | None = None,
        proxies: Sequence[Network] = (),
    ) -> None:
        host, _, port = listen.rpartition(":")
        self._socket = socket.socket(socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET)
        # One server per port unless this instance's workers share it (SO_REUSEPORT); a port
        # in TIME_WAIT is free.
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            self._socket.bind((host.strip("[]"), int(port)))
        except OSError as exc:
            self._socket.close()
            raise cannot_listen(listen, str(exc)) from None
        self.port = int(self._socket.getsockname()[1])
        self.address = f"{host}:{self.port}"
        config = uvicorn.Config(
            build_app(gateway, jobs),
            lifespan="off",
            access_log=False,
            # uvicorn warns once per refused or malformed request: a flood would flood the log.
            log_level="error",
            # The guard sheds idle and half-open connections past its bound and closes slow
            # ones; uvicorn's own bound (503) then counts only connections inside a request.
            http=guarded(ConnectionGuard(limits), proxies),
            limit_concurrency=limits.max_connections + 1,
            ssl_certfile=certfile or None,
            ssl_keyfile=keyfile or None,
            timeout_graceful_shutdown=2,
        )
        self._server = _Server(config)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._server.serve(sockets=[self._socket]))
        # uvicorn sets a flag, not an event, once it accepts connections.
        async with asyncio.timeout(START_TIMEOUT_S):
            while not self._server.started and not self._task.done():  # noqa: ASYNC110
                await asyncio.sleep(START_POLL_S)
        if self._task.done():
            self._task.result()  # uvicorn failed to start: say why

    async def close(self) -> None:
        self._server.should_exit = True
        if self._task is not None:
            await self._task
        self._socket.close()
