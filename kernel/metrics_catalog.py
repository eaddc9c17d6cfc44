"""Every metric Ferryman exports: name -> (type, labels). docs/metrics.md describes them;
tests check that services export exactly these and that dashboards and alerts use no other."""

from __future__ import annotations

TTFT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
"""Time to a generation's first token, at the router and at the node alike."""
TPOT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
"""Time per output token after the first."""

CATALOG: dict[str, tuple[str, tuple[str, ...]]] = {
    # router
    "ferryman_requests": ("counter", ("tenant", "model", "version", "code", "protocol")),
    "ferryman_request_latency_seconds": (
        "histogram",
        ("tenant", "model", "version", "code", "protocol", "kind"),
    ),
    "ferryman_request_service_seconds": ("histogram", ("model", "version")),
    "ferryman_router_ttft_seconds": ("histogram", ("model", "version")),
    "ferryman_router_tpot_seconds": ("histogram", ("model", "version")),
    "ferryman_quota_decisions": ("counter", ("tenant", "decision")),
    "ferryman_fallbacks": ("counter", ("tenant", "model")),
    "ferryman_tokens": ("counter", ("tenant", "model", "direction")),
    "ferryman_cost_usd": ("counter", ("tenant", "model")),
    "ferryman_router_shed": ("counter", ("model", "version")),
    "ferryman_router_limited": ("counter", ()),
    "ferryman_router_stale": ("counter", ()),
    "ferryman_router_concurrency_limit": ("gauge", ()),
    "ferryman_auth_failures": ("counter", ("protocol",)),
    "ferryman_spilled": ("counter", ("tenant", "model")),
    "ferryman_shadow_compared": ("counter", ("model", "version", "result")),
    "ferryman_shadow_skipped": ("counter", ("model", "version")),
    # batcher
    "ferryman_batch_size": ("histogram", ("model", "version")),
    "ferryman_batch_fill_ratio": ("histogram", ("model", "version")),
    "ferryman_coalesced": ("counter", ("model", "version")),
    "ferryman_cache_hits": ("counter", ("model", "version")),
    "ferryman_dispatches": ("counter", ("model", "version", "reason")),
    "ferryman_shed_requests": ("counter", ("model", "version", "reason")),
    "ferryman_queue_depth": ("gauge", ("model", "version")),
    "ferryman_queue_wait_seconds": ("histogram", ("model", "version")),
    "ferryman_batch_retries": ("counter", ("model", "version")),
    "ferryman_dead_letters": ("counter", ("model", "version")),
    "ferryman_breaker_open": ("gauge", ("node",)),
    "ferryman_demand_loads": ("counter", ("model", "version", "outcome")),
    "ferryman_batch_timeouts": ("counter", ("node",)),
    "ferryman_job_items": ("counter", ("outcome",)),
    "ferryman_job_backlog_items": ("gauge", ()),
    "ferryman_job_oldest_item_seconds": ("gauge", ()),
    # node
    "ferryman_node_up": ("gauge", ()),
    "ferryman_node_loaded_versions": ("gauge", ("state",)),
    "ferryman_version_memory_bytes": ("gauge", ("model", "version")),
    "ferryman_node_batches": ("counter", ("model", "version")),
    "ferryman_node_memory_budget_bytes": ("gauge", ()),
    "ferryman_node_evictions": ("counter", ("model", "version")),
    "ferryman_node_loads_refused": ("counter", ("model", "version")),
    "ferryman_node_compute_seconds": ("histogram", ("model", "version")),
    "ferryman_node_item_errors": ("counter", ("model", "version", "reason")),
    "ferryman_generation_ttft_seconds": ("histogram", ("model", "version")),
    "ferryman_generation_tpot_seconds": ("histogram", ("model", "version")),
    "ferryman_generation_tokens": ("counter", ("model", "version", "kind")),
    "ferryman_generation_finished": ("counter", ("model", "version", "reason")),
    "ferryman_generation_sequences": ("gauge", ("model", "version", "state")),
    "ferryman_generation_slots": ("gauge", ("model", "version")),
    "ferryman_generation_preemptions": ("counter", ("model", "version")),
    "ferryman_generation_prefix_hits": ("counter", ("model", "version")),
    "ferryman_generation_prefix_cached_tokens": ("counter", ("model", "version")),
    # rollout controller
    "ferryman_forecast_demand": ("gauge", ("pool",)),
    "ferryman_forecast_replicas": ("gauge", ("pool",)),
    "ferryman_rollout_weight": ("gauge", ("model", "baseline", "candidate")),
    "ferryman_rollout_events": ("counter", ("model", "action")),
    "ferryman_rollout_checks": ("counter", ("model", "outcome")),
}

SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "gauge": ("",),
}


def series_names() -> set[str]:
    """Every sample name a scrape or a PromQL expression may use."""
    names: set[str] = set()
    for name, (kind, _) in CATALOG.items():
        names.update(name + suffix for suffix in SUFFIXES[kind])
    return names


def family(sample_name: str) -> str | None:
    """The catalog metric a sample belongs to, None when it is not ours."""
    for name, (kind, _) in CATALOG.items():
        if any(sample_name == name + suffix for suffix in SUFFIXES[kind]):
            return name
    return None
