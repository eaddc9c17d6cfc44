"""Batcher settings (env prefix ``FERRYMAN_BATCHER_``)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class BatcherSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FERRYMAN_BATCHER_", extra="ignore")

    listen: str = "127.0.0.1:7003"
    metrics_listen: str = ""
    """host:port for Prometheus metrics; empty disables the endpoint."""
    max_message_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)

    # Queues
    max_queue_rows: int = Field(default=2048, ge=1)
    """Rows one (version, parameters) queue holds before answering RESOURCE_EXHAUSTED."""
    max_total_rows: int = Field(default=16384, ge=1)
    max_parameter_sets: int = Field(default=16, ge=1)
    """Queues (distinct parameter sets) one version may have at once; idle ones are
    reclaimed to make room, and an item needing one more is refused (RESOURCE_EXHAUSTED)."""
    default_timeout_s: float = Field(default=30.0, gt=0)
    """Deadline for items sent without a time budget."""
    retry_after_min_s: float = Field(default=0.05, gt=0)
    retry_after_max_s: float = Field(default=10.0, gt=0)

    # Scheduler
    slack_margin_s: float = Field(default=0.002, ge=0)
    aging_s: float = Field(default=0.1, gt=0)
    headroom: float = Field(default=1.25, ge=1.0)
    default_batch_latency_s: float = Field(default=0.005, gt=0)
    """Predicted batch latency before any profile or measurement exists."""
    predictor_smoothing: float = Field(default=0.2, gt=0, le=1)
    rate_window_s: float = Field(default=1.0, gt=0)
    """Time constant of the arrival-rate meter."""
    fixed_window_s: float | None = Field(default=None, ge=0)
    """Replace the adaptive window with a fixed one (benchmarks compare the two)."""

    fair_active_s: float = Field(default=5.0, gt=0)
    """A tenant with work within this long counts as active: while others are active, a
    tenant holds at most its weighted share of each node's batch slots."""

    # Jobs (with FERRYMAN_JOBS_REDIS_URL)
    job_max_inflight: int = Field(default=64, ge=1)
    """Job items one batcher runs at once (they wait in its queues only within this)."""
    job_claim_idle_s: float = Field(default=30.0, gt=0)
    """A job item another worker held this long unanswered is taken over (it died)."""
    job_item_timeout_s: float = Field(default=60.0, gt=0)
    """How long a job item may wait for leftover capacity before it is tried again later."""
    job_read_block_s: float = Field(default=1.0, gt=0)
    job_redis_timeout_s: float = Field(default=2.0, gt=0)
    job_shed_pause_s: float = Field(default=1.0, gt=0)
    """The worker takes no job items within this long of a tenant's item being refused."""

    # Coalescing and cache
    coalesce: bool = True
    """Identical in-flight items share one execution (off: every item runs; benchmarks compare)."""
    max_waiters: int = Field(default=1024, ge=1)
    """Most callers sharing one execution; more start a new one."""
    cache_ttl_s: float = Field(default=60.0, gt=0)
    cache_max_entries: int = Field(default=10000, ge=1)

    # Dispatch
    max_inflight_per_node: int = Field(default=0, ge=0)
    """Batches in flight per node; 0 follows each node's own capacity (NodeInfo): more
    would only queue at the node while the next batch, held here, could still grow."""
    max_tenant_inflight_per_node: int = Field(default=0, ge=0)
    """Batches one tenant may have in flight per node; 0: one on a CPU node (the rest of its
    slots are for other tenants), all of them on a GPU (``ReplicaDirectory.tenant_slots``)."""
    max_attempts: int = Field(default=3, ge=1)
    retry_backoff_s: float = Field(default=0.005, ge=0)
    breaker_threshold: int = Field(default=3, ge=1)
    breaker_cooldown_s: float = Field(default=2.0, gt=0)
    batch_timeout_factor: float = Field(default=4.0, gt=1)
    """A batch may take this many times its predicted latency (and at least
    ``min_batch_timeout_s``) before its node is probed; a node that answers neither is hung:
    its breaker opens and the batch is retried on another replica within the deadline."""
    min_batch_timeout_s: float = Field(default=1.0, gt=0)
    liveness_probe_timeout_s: float = Field(default=0.5, gt=0)
    """How long a probed node (NodeInfo) has to answer before it counts as hung."""
    """A node whose last heartbeat is older than this gets no batches."""
    dead_letters_per_s: float = Field(default=5.0, gt=0)
    """Rate limit of dead-letter writes (bursts up to this many)."""
    drain_timeout_s: float = Field(default=30.0, ge=0)
