"""Transport security shared by every service: TLS listeners and channels, and the
service token that internal APIs (Quota, Batcher, Node) demand of their callers.

Tenants authenticate with API keys on the public port; services authenticate to each
other with a shared token in ``x-ferryman-service-token`` metadata (a Kubernetes Secret
in the chart), optionally on top of mutual TLS. Without a configured token, processes
that share a data dir share one generated there (mode 0600), so ``ferryman up`` and
local setups are protected with no configuration.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import os
import secrets
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from ferryman_server.kernel.net import cannot_listen

log = logging.getLogger("ferryman.security")

TOKEN_HEADER = "x-ferryman-service-token"
TOKEN_FILE = "service-token"
TOKEN_BYTES = 32
# Standard services every server answers without credentials (probes, tooling).
OPEN_PREFIXES = ("/grpc.health.v1.", "/grpc.reflection.")
# One server per port: gRPC enables SO_REUSEPORT by default, which lets a second process
# bind the same port and silently take a share of the connections.
NO_REUSEPORT = ("grpc.so_reuseport", 0)
REUSEPORT = ("grpc.so_reuseport", 1)
"""Only for the processes of one instance that share its port on purpose (router workers)."""


@dataclass(frozen=True)
class Security:
    """How one process listens and dials: TLS material (PEM bytes) and the service token."""

    token: str = ""
    cert: bytes = b""
    key: bytes = b""
    ca: bytes = b""
    """CA that signs the peers' certificates: verifies servers, and clients under mTLS."""
    client_auth: bool = False
    """Internal listeners require a client certificate signed by ``ca`` (mutual TLS)."""
    server_name: str = ""
    """Name to verify in servers' certificates when it differs from the dialled host."""

    @property
    def tls(self) -> bool:
        return bool(self.cert and self.key)

    def metadata(self) -> tuple[tuple[str, str], ...]:
        """Call metadata that authenticates this process to an internal service."""
        return ((TOKEN_HEADER, self.token),) if self.token else ()

    def server_credentials(self, internal: bool) -> grpc.ServerCredentials:
        require = internal and self.client_auth
        return grpc.ssl_server_credentials(
            [(self.key, self.cert)], root_certificates=self.ca or None, require_client_auth=require
        )

    def channel_credentials(self) -> grpc.ChannelCredentials:
        if self.tls and self.client_auth:
            return grpc.ssl_channel_credentials(self.ca or None, self.key, self.cert)
        return grpc.ssl_channel_credentials(self.ca or None)

    def dials_tls(self) -> bool:
        return bool(self.ca or self.tls)

    def channel_options(self) -> list[tuple[str, Any]]:
        return [("grpc.ssl_target_name_override", self.server_name)] if self.server_name else []


def _read(path: str) -> bytes:
    return Path(path).expanduser().read_bytes() if path else b""


def load_security(
    data_dir: Path,
    token: str = "",
    cert: str = "",
    key: str = "",
    ca: str = "",
    client_auth: bool = False,
    server_name: str = "",
) -> Security:
    """Security from settings: file paths for TLS, the token or the data dir's shared one."""
    if bool(cert) != bool(key):
        raise ValueError("TLS needs both a certificate and its key (FERRYMAN_TLS_CERT, FERRYMAN_TLS_KEY)")
    if client_auth and not (cert and ca):
        raise ValueError("mutual TLS needs FERRYMAN_TLS_CERT, FERRYMAN_TLS_KEY and FERRYMAN_TLS_CA")
    return Security(
        token=token or shared_token(data_dir),
        cert=_read(cert),
        key=_read(key),
        ca=_read(ca),
        client_auth=client_auth,
        server_name=server_name,
    )


def shared_token(data_dir: Path) -> str:
    """The data dir's service token, created once (0600) by whichever process comes first.

    Written to a temporary file and linked into place, so a process starting at the same
    moment never reads a half-written (empty) token."""
    path = data_dir / TOKEN_FILE
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=data_dir, prefix=f".{TOKEN_FILE}.")  # mode 0600
        try:
            with os.fdopen(fd, "w") as out:
                out.write(secrets.token_urlsafe(TOKEN_BYTES))
            with contextlib.suppress(FileExistsError):  # another process won the race: use its token
                os.link(temporary, path)
        finally:
            os.unlink(temporary)
    return path.read_text().strip()


def token_matches(metadata: Sequence[tuple[str, Any]] | None, token: str) -> bool:
    presented = next((v for k, v in metadata or () if k == TOKEN_HEADER), "")
    return isinstance(presented, str) and hmac.compare_digest(presented.encode(), token.encode())


if TYPE_CHECKING:  # generic only in the type stubs
    _ServerInterceptor = grpc.aio.ServerInterceptor[Any, Any]
else:
    _ServerInterceptor = grpc.aio.ServerInterceptor


class ServiceTokenInterceptor(_ServerInterceptor):
    """Refuses every call without the service token, but for health and reflection."""

    def __init__(self, token: str) -> None:
        if not token:
            raise ValueError("an internal service needs a service token")
        self._token = token

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        method: str = details.method
        if method.startswith(OPEN_PREFIXES) or token_matches(details.invocation_metadata, self._token):
            return await continuation(details)
        return _refusal(await continuation(details))


def _refusal(handler: grpc.RpcMethodHandler[Any, Any] | None) -> grpc.RpcMethodHandler[Any, Any]:
    """A handler of the same streaming kind as ``handler`` that answers UNAUTHENTICATED."""
    message = "this is an internal API: a valid service token is required"

    async def unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    async def streaming(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)
        yield  # pragma: no cover - abort raises

    if handler is None:
        return grpc.unary_unary_rpc_method_handler(unary)
    if not handler.response_streaming:
        if handler.request_streaming:
            return grpc.stream_unary_rpc_method_handler(unary)
        return grpc.unary_unary_rpc_method_handler(unary)
    if handler.request_streaming:
        return grpc.stream_stream_rpc_method_handler(streaming)
    return grpc.unary_stream_rpc_method_handler(streaming)


def bind(server: grpc.aio.Server, listen: str, security: Security, internal: bool) -> int:
    """Bind ``host:port`` (port 0 picks a free one), with TLS when configured; return the port.

    A port another process holds fails here with a clear message (SO_REUSEPORT is off)."""
    try:
        port = (
            server.add_secure_port(listen, security.server_credentials(internal))
            if security.tls
            else server.add_insecure_port(listen)
        )
    except RuntimeError as exc:
        raise cannot_listen(listen, str(exc)) from None
    if port == 0:
        raise cannot_listen(listen)
    return port


def aio_channel(
    address: str, security: Security, options: Sequence[tuple[str, Any]] = ()
) -> grpc.aio.Channel:
    """An asyncio channel to another Ferryman service, over TLS when configured."""
    opts = [*options, *security.channel_options()]
    if security.dials_tls():
        return grpc.aio.secure_channel(address, security.channel_credentials(), opts)
    return grpc.aio.insecure_channel(address, opts)


def sync_channel(address: str, security: Security, options: Sequence[tuple[str, Any]] = ()) -> grpc.Channel:
    """A blocking channel to another Ferryman service (console, CLI, tests)."""
    opts = [*options, *security.channel_options()]
    if security.dials_tls():
        return grpc.secure_channel(address, security.channel_credentials(), opts)
    return grpc.insecure_channel(address, opts)
