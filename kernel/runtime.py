"""What every Ferryman server process does around its own work: ``run_service``.

Tracing, the gRPC server (health, reflection, message limits, service-token check on
internal services), the bind (a port in use fails at once), the stop event (SIGTERM and
SIGINT, or the caller's), the metrics endpoint, health flips, and the teardown in
reverse order. A service's ``serve_*`` function only builds its parts, registers its
servicers, and says what to do between "stop requested" and "server stopped":

    async with run_service(spec, common, stop) as rt:
        add_FooServicer_to_server(FooServicer(service), rt.server)
        rt.on_close(engine.dispose)
        await rt.serve(on_ready)        # returns once stop is requested (NOT_SERVING by then)
        await service.drain()
        await rt.stop_serving()         # optional: before releasing what calls still use
    # server stopped, metrics endpoint shut, closers run
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry

from ferryman_server.kernel.config import CommonSettings, ServerSettings
from ferryman_server.kernel.metrics_http import serve_metrics
from ferryman_server.kernel.metrics_otlp import otlp_metrics
from ferryman_server.kernel.security import Security, ServiceTokenInterceptor, bind
from ferryman_server.kernel.serving import NOT_SERVING, SERVING, create_server, set_health
from ferryman_server.kernel.telemetry import setup_tracing

log = logging.getLogger("ferryman.runtime")

Closer = Callable[[], Awaitable[Any] | None]


@dataclass(frozen=True)
class ServiceSpec:
    """One server process's port and what it serves there."""

    name: str
    """Tracing service name and log prefix (``router``, ``batcher``, ``node``, ``quota``)."""
    listen: str
    services: Sequence[str]
    """Full names of the gRPC services on the port (health and reflection list these)."""
    max_message_bytes: int
    internal: bool
    """Internal APIs: every call needs the service token (and a client certificate with mTLS)."""
    metrics_listen: str = ""
    metrics: CollectorRegistry | None = None
    grace_s: float | None = 1.0
    """How long in-flight calls get when the server stops."""
    reuse_port: bool = False
    """Share ``listen`` with the other workers of this instance (SO_REUSEPORT)."""
    max_calls: int = 0
    """Calls in progress past which gRPC refuses new ones before any of our code (0: none)."""
    max_streams: int = 0
    """Streams a client may open at once on one connection, advertised in HTTP/2 SETTINGS:
    a client holds the rest itself (0: gRPC's default, no limit)."""

    @classmethod
    def of(
        cls,
        name: str,
        settings: ServerSettings,
        services: Sequence[str],
        metrics: CollectorRegistry,
        *,
        internal: bool = True,
        **more: Any,
    ) -> ServiceSpec:
        """The spec of a server whose settings name its port, metrics port and message size."""
        return cls(
            name=name,
            listen=settings.listen,
            services=services,
            max_message_bytes=settings.max_message_bytes,
            internal=internal,
            metrics_listen=settings.metrics_listen,
            metrics=metrics,
            **more,
        )


class ServiceRuntime:
    """A bound server with its stop event; made by ``run_service``."""

    def __init__(
        self,
        spec: ServiceSpec,
        security: Security,
        stop: asyncio.Event,
        options: Sequence[tuple[str, int]] = (),
    ) -> None:
        self.spec = spec
        self.security = security
        self.stop = stop
        if spec.max_streams:
            options = [*options, ("grpc.max_concurrent_streams", spec.max_streams)]
        self.options = options
        """Server options (keepalive, idle limits, streams) this runtime's server was made with."""
        interceptors = [ServiceTokenInterceptor(security.token)] if spec.internal else []
        self.server, self.health = create_server(
            spec.services, spec.max_message_bytes, interceptors, options, spec.reuse_port, spec.max_calls
        )
        self.port = bind(self.server, spec.listen, security, internal=spec.internal)
        self.address = f"{spec.listen.rsplit(':', 1)[0]}:{self.port}"
        self._started = False
        self._stopped = False
        self._closers: list[Closer] = []

    def on_close(self, closer: Closer) -> None:
        """Run ``closer`` (sync or async) after the server stops; closers run last first."""
        self._closers.append(closer)

    async def start(self, serving: bool) -> None:
        """Start taking calls, reporting SERVING or (while still loading) NOT_SERVING."""
        if not self._started:
            await self.server.start()
            self._started = True
        await set_health(self.health, self.spec.services, SERVING if serving else NOT_SERVING)

    async def serve(self, on_ready: Callable[[str], None] | None = None, address: str = "") -> None:
        """Report SERVING, tell ``on_ready`` the address, and wait until stop is requested;
        returns with NOT_SERVING reported (the caller drains, then leaves the block)."""
        await self.start(serving=True)
        log.info("%s listening on %s", self.spec.name, address or self.address)
        if on_ready is not None:
            on_ready(address or self.address)
        await self.stop.wait()
        # Every service name at once (per-version names on nodes too), and for good.
        await self.health.enter_graceful_shutdown()

    async def stop_serving(self) -> None:
        """Stop the server (in-flight calls get the spec's grace); once, whoever asks first:
        a service that must stop taking calls before it releases its parts calls this."""
        if not self._stopped:
            self._stopped = True
            await self.server.stop(grace=self.spec.grace_s)

    async def close(self) -> None:
        await self.stop_serving()
        for closer in reversed(self._closers):
            result = closer()
            if result is not None:
                await result


def stop_on_signals() -> asyncio.Event:
    """An event set by SIGTERM or SIGINT."""
    event = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, event.set)
    return event


@asynccontextmanager
async def run_service(
    spec: ServiceSpec, common: CommonSettings, stop: asyncio.Event | None = None
) -> AsyncIterator[ServiceRuntime]:
    """Tracing, a bound server, the stop event (``stop``, or SIGTERM/SIGINT) and the
    metrics endpoint for the block; the server stopped and closers run after it."""
    setup_tracing(spec.name)
    runtime = ServiceRuntime(spec, common.security(), stop or stop_on_signals(), common.server_options())
    metrics_server = (
        serve_metrics(spec.metrics_listen, spec.metrics, common.handshake_timeout_s) if spec.metrics else None
    )
    with otlp_metrics(spec.metrics, spec.name) if spec.metrics else nullcontext():
        try:
            yield runtime
        finally:
            await runtime.close()
            if metrics_server is not None:
                metrics_server.shutdown()
