"""Rollout controller settings (env prefix ``FERRYMAN_ROLLOUT_``)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from ferryman_kernel.config import MetricsListen


class RolloutSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="FERRYMAN_ROLLOUT_", extra="ignore", use_attribute_docstrings=True
    )

    listen: str = "127.0.0.1:7006"
    """host:port of its health service (it serves no other API)."""
    metrics_listen: MetricsListen = ""
    router_metrics: list[str] = Field(default_factory=list)
    """Every router's /metrics URL: the analysis sums them (a JSON list in the environment)."""
    prometheus_url: str = ""
    """A Prometheus scraping every router: read instead of ``router_metrics`` (on Kubernetes,
    where routers come and go)."""
    check_s: float = Field(default=1.0, gt=0)
    """How often each rollout is checked."""
