"""Router settings (env prefix ``FERRYMAN_ROUTER_``)."""

from __future__ import annotations

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from ferryman_server.kernel.config import ListenAddress, MessageBytes, MetricsListen
from ferryman_server.router.limiter import LimitConfig


class RouterSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="FERRYMAN_ROUTER_", extra="ignore", use_attribute_docstrings=True
    )

    listen: ListenAddress = "127.0.0.1:7001"
    metrics_listen: MetricsListen = ""
    http_listen: str = ""
    """host:port of the HTTP doors (OIP v2 REST on /v2, OpenAI-compatible on /v1, the OpenAPI
    document on /openapi.json); empty serves none. TLS settings apply to it too."""
    http_max_connections: int = Field(default=1024, ge=1)
    """Open HTTP connections the HTTP port keeps. Past it a new connection sheds the one that
    has waited longest for a request (a flood of idle or half-open connections sheds
    itself); only when every connection is inside a request does a new one get 503."""
    http_max_connections_per_peer: int = Field(default=256, ge=1)
    """Open HTTP connections one client address keeps (shed as above; a peer with this many
    requests in flight gets no more connections)."""
    http_header_timeout_s: float = Field(default=10.0, gt=0)
    """A connection must send a request's line and headers within this of opening (or of
    its last answer); else it is closed (408 when it had sent part of them)."""
    http_body_timeout_s: float = Field(default=60.0, gt=0)
    """A request's body must arrive whole within this of its headers; else it is closed."""
    http_write_timeout_s: float = Field(default=30.0, gt=0)
    """An answer (a streamed batch output, embeddings, an SSE stream) whose client reads
    none of it for this long (its socket's buffers full) is cut, and its connection closed."""
    http_max_header_bytes: int = Field(default=64 * 1024, ge=1024)
    """Most bytes of a request line and headers; more is refused 431 before any work."""
    batchers: str = "127.0.0.1:7003"
    """Comma-separated batcher addresses; each model goes to one by rendezvous hashing. A
    name stands for every address it resolves to (a Kubernetes headless Service: one per
    batcher pod)."""
    batcher_discovery_s: float = Field(default=5.0, gt=0)
    """How often batcher names are resolved again (pods come and go)."""
    quota_address: str = ""
    """A Quota server's address; empty hosts the quota service in this process."""
    internal_listen: str = ""
    """host:port where an in-process Quota service is served to other services (the
    console), behind the service token; empty serves it nowhere. Never the public port."""
    workers: int = Field(default=1, ge=1)
    """Router processes serving the public port (and the HTTP doors) together, each with its
    own event loop, sharing the port by SO_REUSEPORT; the kernel spreads connections over
    them (cli/workers.py)."""
    reuse_port: bool = False
    """Bind the public port and the HTTP doors shared (set for each of several workers)."""
    streams_per_batcher: int = Field(default=2, ge=1)
    """Submit streams kept open to each batcher (items of all requests share them)."""
    default_timeout_s: float = Field(default=30.0, gt=0)
    """Deadline of requests that come without one."""
    lease_renew_s: float = Field(default=2.0, gt=0)
    """How often the leases of running requests' reservations are renewed: at most a third
    of the quota service's ``FERRYMAN_QUOTA_LEASE_S`` (checked when the router hosts it)."""
    quota_timeout_s: float = Field(default=0.5, gt=0)
    """Most of a request's budget a quota call may take."""
    repeat_poll_s: float = Field(default=0.005, gt=0)
    """A repeat of a request id whose first call still runs asks the quota store again
    after this, then after twice as long each time, up to ``repeat_poll_max_s``: it is
    answered with that call's answer, never run again."""
    repeat_poll_max_s: float = Field(default=0.1, gt=0)
    """The longest wait between two looks at a running first call (see repeat_poll_s)."""
    max_message_bytes: MessageBytes = 64 * 1024 * 1024
    max_generate_tokens: int = Field(default=4096, ge=1)
    """Most ``max_tokens`` one generation may ask for (nodes also cut it to the context)."""
    shed_overload: bool = True
    """Refuse at once requests predicted to miss their deadline: by the recent latency of
    their version, or by the batcher's last overload refusal (router/shedding.py). Off, every
    request goes on and is refused (or times out) further down."""
    shed_smoothing: float = Field(default=0.2, gt=0, le=1)
    """Weight of each answered request in the latency average the router sheds by."""
    adaptive_limit: bool = True
    """Refuse at the door, at next to no cost, requests past a concurrency limit that load
    refusals further down adjust (router/limiter.py); off, every request goes on."""
    max_calls: int = Field(default=0, ge=0)
    """Calls in progress on the public port past which gRPC itself refuses a new one
    (RESOURCE_EXHAUSTED, "Concurrent RPC limit exceeded") before it is read or any of our
    code runs: the cheapest refusal there is, and a bound on the backlog in front of the
    router under overload. 0: no such bound."""
    max_streams_per_connection: int = Field(default=0, ge=0)
    """Calls one client connection may have in progress, advertised as HTTP/2's
    SETTINGS_MAX_CONCURRENT_STREAMS: a client holds the rest on its side (where their
    deadlines keep running) instead of queueing them in front of the router, and gRPC's
    transport refuses a stream past it before any Python runs. Under overload this keeps
    goodput up when connections x this stays near capacity x deadline (docs/benchmarks.md:
    8 connections x 8 held 0.80 of capacity at 2x and 0.97 at 3x where no limit gave 0.19
    and 0.09; x 16 or more did not). 0: no limit (gRPC's default); it also caps what one
    SDK client's channel can have in flight."""
    limit_initial: int = Field(default=1000, ge=1)
    """Requests in flight at once before any load refusal (also the ceiling)."""
    limit_min: int = Field(default=16, ge=1)
    """The limit never drops below this: enough to keep a device's batches full."""
    limit_backoff: float = Field(default=0.9, gt=0, lt=1)
    """After a window with too many load refusals: this times the most that were in flight."""
    limit_drop_ratio: float = Field(default=0.01, ge=0, lt=1)
    """Share of a window's requests refused further down for load that cuts the limit."""
    limit_window_s: float = Field(default=0.1, gt=0)
    """Length of one window the adaptive limit is judged over."""
    limit_window_samples: int = Field(default=20, ge=1)
    """Answers a window needs before its refusal share may move the limit."""
    max_tenant_labels: int = Field(default=100, ge=1)
    """Tenants named in metric labels; the rest are counted as ``other``."""

    shadow_max_inflight: int = Field(default=64, ge=1)
    """Shadow copies one router runs at once; more are skipped (counted), never queued."""
    shadow_timeout_s: float = Field(default=5.0, gt=0)
    """Longest a shadow copy may run before it is dropped (counted as timed out)."""
    shadow_rtol: float = Field(default=1e-4, ge=0)
    """Relative tolerance within which a shadow's outputs match the live ones."""
    shadow_atol: float = Field(default=1e-5, ge=0)
    """Absolute tolerance within which a shadow's outputs match the live ones."""

    job_max_items: int = Field(default=50_000, ge=1)
    """Items one job may hold."""
    job_window_s: float = Field(default=86_400.0, gt=0)
    """A job's completion window when it names none (what is left then expires)."""
    job_max_window_s: float = Field(default=7 * 86_400.0, gt=0)
    """The longest completion window a job may ask for."""
    job_price_factor: float = Field(default=0.5, ge=0)
    """Job items cost this times the version's price."""
    job_store_timeout_s: float = Field(default=2.0, gt=0)
    """Longest one call to the job store (Redis or the registry database) may take."""
    job_file_bytes_per_day: int = Field(default=1 << 30, ge=1)
    """Bytes of batch input files one tenant may upload per UTC day (they are kept for the
    jobs' retention, in Redis or the registry database)."""
    job_charge_every_s: float = Field(default=2.0, gt=0)
    """How often a router charges what jobs have cost since to their tenants' daily spend
    (``ferryman_server.router.job_charges``): a job may overrun a daily cost limit by this long's work."""
    job_charge_batch: int = Field(default=500, ge=1)
    """Jobs charged per pass at most (the rest on the next)."""
    spill_margin_s: float = Field(default=0.05, ge=0)
    """A request that may spill into a job is tried in real time with this much less of its
    deadline: the time to queue its job if it is refused late (at its deadline)."""

    feedback_window_s: float = Field(default=3600.0, gt=0)
    """How long after an answer (on a route that splits traffic) its Feedback is taken."""
    feedback_max_requests: int = Field(default=100_000, ge=1)
    """Answers a router remembers for Feedback in its memory (the oldest go first)."""
    feedback_max_metrics: int = Field(default=8, ge=1)
    """Distinct metrics one request may get."""
    feedback_redis_url: str = ""
    """Redis the routers share answers in, so Feedback reaches any router; empty: the
    quota's Redis when it has one, else this router's memory."""

    @model_validator(mode="after")
    def _agree(self) -> RouterSettings:
        if self.limit_min > self.limit_initial:
            raise ValueError("FERRYMAN_ROUTER_LIMIT_MIN may not exceed FERRYMAN_ROUTER_LIMIT_INITIAL")
        if self.job_window_s > self.job_max_window_s:
            raise ValueError("FERRYMAN_ROUTER_JOB_WINDOW_S may not exceed FERRYMAN_ROUTER_JOB_MAX_WINDOW_S")
        if self.http_max_connections_per_peer > self.http_max_connections:
            raise ValueError(
                "FERRYMAN_ROUTER_HTTP_MAX_CONNECTIONS_PER_PEER may not exceed "
                "FERRYMAN_ROUTER_HTTP_MAX_CONNECTIONS"
            )
        if self.repeat_poll_s > self.repeat_poll_max_s:
            raise ValueError("FERRYMAN_ROUTER_REPEAT_POLL_S may not exceed FERRYMAN_ROUTER_REPEAT_POLL_MAX_S")
        return self

    def limit_config(self) -> LimitConfig:
        return LimitConfig(
            initial=self.limit_initial,
            minimum=self.limit_min,
            backoff=self.limit_backoff,
            drop_ratio=self.limit_drop_ratio,
            window_s=self.limit_window_s,
            window_samples=self.limit_window_samples,
        )

    def batcher_addresses(self) -> list[str]:
        return [a.strip() for a in self.batchers.split(",") if a.strip()]
