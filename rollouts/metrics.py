"""Prometheus metrics of the rollout controller (what the canary dashboard annotates)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class RolloutMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.weight = Gauge(
            "ferryman_rollout_weight",
            "Weight (%) a rolling-out candidate version gets; 0 while warming.",
            ["model", "baseline", "candidate"],
            registry=self.registry,
        )
        self.events = Counter(
            "ferryman_rollout_events_total",
            "Rollout transitions the controller made (weigh, advance, roll_back, pause).",
            ["model", "action"],
            registry=self.registry,
        )
        self.checks = Counter(
            "ferryman_rollout_checks_total",
            "Rollout checks by the verdict of the step's window.",
            ["model", "outcome"],
            registry=self.registry,
        )
        self.forecast_demand = Gauge(
            "ferryman_forecast_demand",
            "A pool's demand (requests a second) expected by the time a replica asked for now "
            "serves, from its own history.",
            ["pool"],
            registry=self.registry,
        )
        self.forecast_replicas = Gauge(
            "ferryman_forecast_replicas",
            "Replicas a pool needs ready by then (what its KEDA ScaledObject scales to ahead of "
            "the demand, beside its queue depth).",
            ["pool"],
            registry=self.registry,
        )
