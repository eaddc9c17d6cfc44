"""The batcher's Prometheus metrics (names under ``ferryman_``; see docs/metrics.md)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
FILL_RATIO_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
WAIT_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0)


class BatcherMetrics:
    """One registry per batcher instance (several may share a process in tests)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        labels = ["model", "version"]
        self.demand_loads = Counter(
            "ferryman_demand_loads",
            "Loads on demand of versions no node served, by outcome (loaded, no_room, failed).",
            [*labels, "outcome"],
            registry=self.registry,
        )
        self.batch_size = Histogram(
            "ferryman_batch_size",
            "Rows per dispatched batch.",
            labels,
            buckets=BATCH_SIZE_BUCKETS,
            registry=self.registry,
        )
        self.batch_fill_ratio = Histogram(
            "ferryman_batch_fill_ratio",
            "Rows per batch / the version's max batch size.",
            labels,
            buckets=FILL_RATIO_BUCKETS,
            registry=self.registry,
        )
        self.coalesced = Counter(
            "ferryman_coalesced",
            "Requests that shared an identical in-flight execution.",
            labels,
            registry=self.registry,
        )
        self.cache_hits = Counter(
            "ferryman_cache_hits",
            "Requests answered from the response cache.",
            labels,
            registry=self.registry,
        )
        self.dispatches = Counter(
            "ferryman_dispatches",
            "Batches dispatched, by reason.",
            [*labels, "reason"],
            registry=self.registry,
        )
        self.shed = Counter(
            "ferryman_shed_requests",
            "Requests refused or failed before running, by reason.",
            [*labels, "reason"],
            registry=self.registry,
        )
        self.queue_depth = Gauge(
            "ferryman_queue_depth", "Rows waiting in the queue.", labels, registry=self.registry
        )
        self.queue_wait = Histogram(
            "ferryman_queue_wait_seconds",
            "Time from arrival to dispatch.",
            labels,
            buckets=WAIT_BUCKETS,
            registry=self.registry,
        )
        self.retries = Counter(
            "ferryman_batch_retries", "Batches retried on another replica.", labels, registry=self.registry
        )
        self.dead_letters = Counter(
            "ferryman_dead_letters", "Items isolated as failing the model.", labels, registry=self.registry
        )
        self.job_items = Counter(
            "ferryman_job_items",
            "Job items this batcher's worker took, by outcome: answered, failed (the model's "
            "error), retried (no capacity or replica in time: taken again later), dropped (the "
            "job had ended: never run, never charged).",
            ["outcome"],
            registry=self.registry,
        )
        self.job_backlog = Gauge(
            "ferryman_job_backlog_items",
            "Job items queued or running, not yet recorded.",
            registry=self.registry,
        )
        self.job_oldest = Gauge(
            "ferryman_job_oldest_item_seconds",
            "Age of the oldest job item not yet recorded.",
            registry=self.registry,
        )
        self.batch_timeouts = Counter(
            "ferryman_batch_timeouts",
            "Batches that outlived their per-batch timeout on a node (hung or far too slow).",
            ["node"],
            registry=self.registry,
        )
        self.breaker_state = Gauge(
            "ferryman_breaker_open",
            "1 while the node's breaker is open or half-open.",
            ["node"],
            registry=self.registry,
        )
