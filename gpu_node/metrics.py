"""The node's Prometheus metrics (see docs/metrics.md)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from ferryman_server.kernel.metrics_catalog import TPOT_BUCKETS, TTFT_BUCKETS

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
        self.version_memory = Gauge(
            "ferryman_version_memory_bytes",
            "Memory a version holds on this node (device memory on a GPU), measured at load; a "
            "causal LM's reserved KV cache included.",
            labels,
            registry=self.registry,
        )
        self.memory_budget = Gauge(
            "ferryman_node_memory_budget_bytes",
            "What this node's versions may hold together (its memory budget).",
            registry=self.registry,
        )
        self.evictions = Counter(
            "ferryman_node_evictions",
            "Versions unloaded to make room for another, least recently used first.",
            labels,
            registry=self.registry,
        )
        self.no_room = Counter(
            "ferryman_node_loads_refused",
            "Loads refused because the version would not fit the memory budget, even after "
            "evicting what could be.",
            labels,
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
        self.ttft = Histogram(
            "ferryman_generation_ttft_seconds",
            "Time from a generation's arrival at the node to its first token (the node's part of "
            "ferryman_router_ttft_seconds, which the SLOs use).",
            labels,
            buckets=TTFT_BUCKETS,
            registry=self.registry,
        )
        self.tpot = Histogram(
            "ferryman_generation_tpot_seconds",
            "Mean time per output token after the first, one sample per generation.",
            labels,
            buckets=TPOT_BUCKETS,
            registry=self.registry,
        )
        self.generated = Counter(
            "ferryman_generation_tokens",
            "Tokens of finished generations, by kind (prompt, completion).",
            [*labels, "kind"],
            registry=self.registry,
        )
        self.finished = Counter(
            "ferryman_generation_finished",
            "Generations ended, by finish reason (stop, length, cancelled, quota, deadline, error).",
            [*labels, "reason"],
            registry=self.registry,
        )
        self.sequences = Gauge(
            "ferryman_generation_sequences",
            "Generations in the engine, by state (running: holding a KV cache slot; waiting).",
            [*labels, "state"],
            registry=self.registry,
        )
        self.slots = Gauge(
            "ferryman_generation_slots",
            "KV cache slots of a causal-LM version (generations it can run at once).",
            labels,
            registry=self.registry,
        )
        self.preemptions = Counter(
            "ferryman_generation_preemptions",
            "Generations sent back to waiting to free a slot for a tenant below its share.",
            labels,
            registry=self.registry,
        )
        self.prefix_hits = Counter(
            "ferryman_generation_prefix_hits",
            "Generations that reused a prompt prefix their tenant's earlier generation cached.",
            labels,
            registry=self.registry,
        )
        self.prefix_tokens = Counter(
            "ferryman_generation_prefix_cached_tokens",
            "Prompt tokens taken from the prefix cache instead of computed.",
            labels,
            registry=self.registry,
        )
