"""Quota settings (env prefix ``FERRYMAN_QUOTA_``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class QuotaSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FERRYMAN_QUOTA_", extra="ignore")

    listen: str = "127.0.0.1:7002"
    repeated_log_period_s: float = Field(default=10.0, gt=0)
    """A warning that repeats for one cause (the backend down) is logged once per period."""
    metrics_listen: str = ""
    """host:port of its /metrics (the process's own; quota decisions are the router's)."""
    backend: Literal["memory", "redis"] = "memory"
    redis_url: str = ""
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
    the running ones (every lease/3), so a crashed router's slots free within this."""
    max_message_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
