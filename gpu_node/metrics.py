"""The node's Prometheus metrics (see docs/metrics.md)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

COMPUTE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0)


class NodeMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        labels = ["model", "version"]
        self.up = Gauge(
            "ferryman_node_up", "1 while the node serves (0 while draining).", registry=self.registry
        )
        self.loaded = Gauge(
            "ferryman_node_loaded_versions",
            "Versions on this node, by state.",
            ["state"],
            registry=self.registry,
        )
        self.batches = Counter("ferryman_node_batches", "Batches run.", labels, registry=self.registry)
        self.compute = Histogram(
            "ferryman_node_compute_seconds",
            "Model compute time per batch.",
            labels,
            buckets=COMPUTE_BUCKETS,
            registry=self.registry,
        )
        self.item_errors = Counter(
            "ferryman_node_item_errors",
            "Items that failed, by reason.",
            [*labels, "reason"],
            registry=self.registry,
        )
