"""Rollout controller settings (env prefix ``FERRYMAN_ROLLOUT_``)."""

from __future__ import annotations

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from ferryman_server.kernel.config import MetricsListen
from ferryman_server.rollouts.forecast import CapacityPolicy


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
    forecast_pools: dict[str, str] = Field(default_factory=dict)
    """Node pool -> a PromQL expression of its demand in requests a second (e.g.
    ``sum(rate(ferryman_requests_total{model="m"}[5m]))``): each pool's replicas are
    forecast from its own history in the Prometheus at ``prometheus_url`` and published as
    ``ferryman_forecast_replicas{pool}`` (a JSON object in the environment)."""
    forecast_s: float = Field(default=300.0, gt=0)
    """How often the forecasts are made."""
    forecast_step_s: float = Field(default=300.0, gt=0)
    """The demand history's resolution."""
    forecast_lead_s: float = Field(default=600.0, ge=0)
    """From asking for a node replica to its serving (pod start, model load, warm-up): how
    far ahead the forecast looks."""
    forecast_per_replica: float = Field(default=50.0, gt=0)
    """Requests a second one replica serves at its target utilisation."""
    forecast_headroom: float = Field(default=1.2, ge=1.0)
    """Capacity kept above the forecast demand."""

    @model_validator(mode="after")
    def _agree(self) -> RolloutSettings:
        if self.forecast_pools and not self.prometheus_url:
            raise ValueError(
                "FERRYMAN_ROLLOUT_FORECAST_POOLS reads history from FERRYMAN_ROLLOUT_PROMETHEUS_URL"
            )
        return self

    def capacity_policy(self) -> CapacityPolicy:
        """The forecast's policy from these settings."""
        return CapacityPolicy(
            per_replica=self.forecast_per_replica,
            step_s=self.forecast_step_s,
            lead_s=self.forecast_lead_s,
            headroom=self.forecast_headroom,
        )
