"""Quota settings (env prefix ``FERRYMAN_QUOTA_``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from ferryman_server.kernel.config import ListenAddress, MessageBytes, MetricsListen
from ferryman_server.kernel.quota import MAX_ANSWER_BYTES

ANSWER_ENVELOPE_BYTES = 4096
"""Room a Reserve reply needs beside the answer it carries (decision, violations)."""


class QuotaSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="FERRYMAN_QUOTA_", extra="ignore", use_attribute_docstrings=True
    )

    listen: ListenAddress = "127.0.0.1:7002"
    repeated_log_period_s: float = Field(default=10.0, gt=0)
    """A warning that repeats for one cause (the backend down) is logged once per period."""
    metrics_listen: MetricsListen = ""
    backend: Literal["memory", "redis"] = "memory"
    """Where the counters live: this process's memory (one quota service), or Redis (any
    number of quota services and routers share it, exactly)."""
    redis_url: str = ""
    """The Redis of the ``redis`` backend (``redis://host:port/db``)."""
    fail_mode: Literal["open", "closed"] = "closed"
    """What Reserve answers when the backend cannot be reached: admit, or refuse."""
    backend_timeout_s: float = Field(default=0.25, gt=0)
    """Longest a backend call may take before the fail mode applies."""
    settle_attempts: int = Field(default=3, ge=1)
    """Tries of a Commit or Release against a slow backend (each within backend_timeout_s)."""
    reservation_ttl_s: float = Field(default=300.0, gt=0)
    """How long a request id is remembered after its reservation ends: a retry within
    this is answered as the first call was and never charged twice."""
    lease_s: float = Field(default=10.0, gt=0)
    """A reservation ends this long after its last renewal unless settled: callers renew
    the running ones (``FERRYMAN_ROUTER_LEASE_RENEW_S``, at most a third of this), so a
    crashed router's slots free within this."""
    redis_max_connections: int = Field(default=64, ge=1)
    """Connections to Redis the quota service keeps at most; a call past them waits for one
    (within ``backend_timeout_s``) instead of failing."""
    kept_answer_bytes: int = Field(default=256 * 1024, ge=0, le=MAX_ANSWER_BYTES)
    """The largest answer kept for repeats of a request id the caller chose; a repeat of a
    request whose answer was larger is refused (ALREADY_EXISTS), never run again."""
    kept_answers_per_tenant_bytes: int = Field(default=16 * 1024 * 1024, ge=0)
    """Bytes of one tenant's kept answers at once, in either backend (past it, new answers
    are not kept and their repeats refused ANSWER_NOT_KEPT); an answer is kept for its id's
    lifetime (Redis: ``2 x reservation_ttl_s``). Only ids the application chose keep one.
    Size Redis's maxmemory above tenants x this."""
    max_message_bytes: MessageBytes = 4 * 1024 * 1024

    @model_validator(mode="after")
    def _agree(self) -> QuotaSettings:
        if self.backend == "redis" and not self.redis_url:
            raise ValueError("FERRYMAN_QUOTA_REDIS_URL is required with the redis backend")
        if self.kept_answer_bytes + ANSWER_ENVELOPE_BYTES > self.max_message_bytes:
            raise ValueError(
                "FERRYMAN_QUOTA_KEPT_ANSWER_BYTES must leave room in FERRYMAN_QUOTA_MAX_MESSAGE_BYTES "
                "for the Reserve that returns it"
            )
        return self
