"""Settings shared by every Ferryman process (env prefix ``FERRYMAN_``).

Each service adds its own settings model with its own prefix
(``FERRYMAN_NODE_``, ``FERRYMAN_ROUTER_``, ...); what all of them need, where the
registry lives and where local data goes, is here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Protocol

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from ferryman.sdk.calls import MIN_KEEPALIVE_S
from ferryman_server.kernel.proxies import Network, networks
from ferryman_server.kernel.security import Security, load_security


def default_data_dir() -> Path:
    """Where the embedded setup keeps its SQLite registry and model artifacts."""
    return Path.home() / ".ferryman"


MS_PER_S = 1000

ListenAddress = Annotated[
    str, Field(description="host:port its gRPC server binds (port 0: any free one, logged when ready).")
]
MetricsListen = Annotated[
    str, Field(description="host:port of the process's Prometheus /metrics; empty serves none.")
]
MessageBytes = Annotated[
    int, Field(ge=1024, description="Largest gRPC message its server receives or sends, in bytes.")
]


class ServerSettings(Protocol):
    """What every server's settings model says about its own port (``ServiceSpec.of``)."""

    listen: str
    metrics_listen: str
    max_message_bytes: int


class CommonSettings(BaseSettings):
    """Settings every service reads."""

    model_config = SettingsConfigDict(env_prefix="FERRYMAN_", extra="ignore", use_attribute_docstrings=True)

    data_dir: Path = Field(default_factory=default_data_dir)
    """Local state: the SQLite registry, built demo model artifacts (default ``~/.ferryman``)."""

    database_url: str = ""
    """SQLAlchemy URL of the registry; empty means SQLite at ``data_dir/registry.db``."""

    log_level: str = "INFO"
    """Level of the JSON logs every process writes (DEBUG, INFO, WARNING, ERROR)."""

    service_token: SecretStr = SecretStr("")
    """Shared secret internal services (Quota, Batcher, Node) demand of their callers;
    empty means the one generated in ``data_dir`` (shared by processes on this machine)."""
    tls_cert: str = ""
    """PEM certificate every listener serves (TLS is off without it)."""
    tls_key: str = ""
    """PEM private key of ``tls_cert``."""
    tls_ca: str = ""
    """PEM CA that signs the services' certificates: clients verify servers with it."""
    tls_client_auth: bool = False
    """Internal listeners require client certificates signed by ``tls_ca`` (mutual TLS)."""
    tls_server_name: str = ""
    """Name checked in servers' certificates when it differs from the dialled host."""

    trusted_proxies: str = ""
    """Reverse proxies (CIDRs or addresses, comma-separated: an ingress's pod network) whose
    forwarded client address (``Forwarded``, else ``X-Forwarded-For``) is believed: the HTTP
    doors' and the console's per-client bounds and the console's login throttle key on it.
    From anyone else the TCP peer is the client, whatever headers it sends."""

    jobs_redis_url: str = ""
    """Redis holding durable jobs (the router queues them, batchers run them)."""
    jobs_in_registry: bool = False
    """Without a jobs Redis, keep durable jobs in the registry database (one router: the
    embedded platform, which ``ferryman up`` turns this on for). Neither: no Jobs API."""

    registry_refresh_s: float = Field(default=0.5, gt=0)
    """How often routers, batchers and quota services re-read the registry: key
    revocations, route changes and node moves apply within this."""
    heartbeat_timeout_s: float = Field(default=10.0, gt=0)
    """A node whose last heartbeat is older than this gets no traffic (routers and
    batchers must agree on it, so it is set once, here)."""

    keepalive_s: float = Field(default=30.0, gt=0)
    """Servers ping each connection this often (idle ones too) and close one that does not
    answer within ``keepalive_timeout_s``: a client that vanished (a half-open connection)
    is dropped in under a minute instead of never."""
    keepalive_timeout_s: float = Field(default=10.0, gt=0)
    """How long a keepalive ping may go unanswered before the connection is closed."""
    max_connection_idle_s: float = Field(default=900.0, gt=0)
    """A connection with no call for this long is closed (GOAWAY; clients reconnect)."""
    handshake_timeout_s: float = Field(default=5.0, gt=0)
    """A new connection to a gRPC or metrics port must finish its TLS handshake and its
    HTTP/2 preface (gRPC) or its request headers (metrics) within this, or it is closed: a
    client that connects and goes silent holds nothing for long (gRPC's own default: 120 s)."""

    def proxies(self) -> tuple[Network, ...]:
        """``trusted_proxies`` as networks."""
        return networks(self.trusted_proxies)

    @model_validator(mode="after")
    def _agree(self) -> CommonSettings:
        try:
            self.proxies()
        except ValueError as exc:
            raise ValueError(f"FERRYMAN_TRUSTED_PROXIES: {exc}") from None
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("FERRYMAN_TLS_CERT and FERRYMAN_TLS_KEY go together: set both or neither")
        if self.tls_client_auth and not self.tls_ca:
            raise ValueError("FERRYMAN_TLS_CLIENT_AUTH needs FERRYMAN_TLS_CA to check client certificates")
        if self.keepalive_timeout_s >= self.keepalive_s:
            raise ValueError("FERRYMAN_KEEPALIVE_TIMEOUT_S must be shorter than FERRYMAN_KEEPALIVE_S")
        if self.heartbeat_timeout_s <= self.registry_refresh_s:
            raise ValueError(
                "FERRYMAN_HEARTBEAT_TIMEOUT_S must be longer than FERRYMAN_REGISTRY_REFRESH_S "
                "(or a live node's heartbeat can look stale between two reads)"
            )
        return self

    def server_options(self) -> list[tuple[str, int]]:
        """gRPC server options for keepalive and idle connections."""
        return [
            ("grpc.keepalive_time_ms", int(self.keepalive_s * MS_PER_S)),
            ("grpc.keepalive_timeout_ms", int(self.keepalive_timeout_s * MS_PER_S)),
            # What gRPC's HTTP/2 transport waits for a PING ack before closing (measured: with
            # keepalive_timeout alone an unanswered keepalive ping never closed the connection).
            ("grpc.http2.ping_timeout_ms", int(self.keepalive_timeout_s * MS_PER_S)),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
            # Clients' keepalive pings (the SDK's, every 30 s while a call is open) are
            # accepted as often as every MIN_KEEPALIVE_S, however long the call sends
            # nothing: gRPC's default (5 min without data, then GOAWAY) cut a quiet watch.
            ("grpc.http2.min_recv_ping_interval_without_data_ms", int(MIN_KEEPALIVE_S * MS_PER_S)),
            ("grpc.http2.max_ping_strikes", 2),
            ("grpc.max_connection_idle_ms", int(self.max_connection_idle_s * MS_PER_S)),
            # Covers the client's HTTP/2 preface and SETTINGS too (measured: 200 connections
            # holding part of the preface all closed within the bound).
            ("grpc.server_handshake_timeout_ms", int(self.handshake_timeout_s * MS_PER_S)),
        ]

    def security(self) -> Security:
        """TLS material and the service token of this process."""
        return load_security(
            self.data_dir,
            token=self.service_token.get_secret_value(),
            cert=self.tls_cert,
            key=self.tls_key,
            ca=self.tls_ca,
            client_auth=self.tls_client_auth,
            server_name=self.tls_server_name,
        )

    def resolved_database_url(self) -> str:
        """The registry URL, defaulting to the embedded SQLite file."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.data_dir / 'registry.db'}"
