"""Batcher settings (env prefix ``FERRYMAN_BATCHER_``)."""

from __future__ import annotations

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from ferryman_server.kernel.config import ListenAddress, MessageBytes, MetricsListen


class BatcherSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="FERRYMAN_BATCHER_", extra="ignore", use_attribute_docstrings=True
    )

    listen: ListenAddress = "127.0.0.1:7003"
    metrics_listen: MetricsListen = ""
    max_message_bytes: MessageBytes = 64 * 1024 * 1024

    # Queues
    max_queue_rows: int = Field(default=2048, ge=1)
    """Rows one (version, parameters) queue holds before answering RESOURCE_EXHAUSTED."""
    max_total_rows: int = Field(default=16384, ge=1)
    """Rows all of the batcher's queues hold together before answering RESOURCE_EXHAUSTED."""
    max_parameter_sets: int = Field(default=16, ge=1)
    """Queues (distinct parameter sets) one version may have at once; idle ones are
    reclaimed to make room, and an item needing one more is refused (RESOURCE_EXHAUSTED)."""
    default_timeout_s: float = Field(default=30.0, gt=0)
    """Deadline for items sent without a time budget."""
    retry_after_min_s: float = Field(default=0.05, gt=0)
    """Shortest wait a full queue's refusal tells the client (its RetryInfo)."""
    retry_after_max_s: float = Field(default=10.0, gt=0)
    """Longest wait a full queue's refusal tells the client (the queue's drain time, capped)."""

    # Scheduler
    slack_margin_s: float = Field(default=0.002, ge=0)
    """A batch is dispatched when its most urgent item's slack (deadline less now less the
    predicted batch time) falls to this."""
    aging_s: float = Field(default=0.1, gt=0)
    """Each this long an item waits lifts it one priority class (nothing starves)."""
    headroom: float = Field(default=1.25, ge=1.0)
    """Batch sizing keeps up with this times the measured arrival rate."""
    default_batch_latency_s: float = Field(default=0.005, gt=0)
    """Predicted batch latency before any profile or measurement exists."""
    predictor_smoothing: float = Field(default=0.2, gt=0, le=1)
    """Weight of each measured batch in the predicted batch latency."""
    rate_window_s: float = Field(default=1.0, gt=0)
    """Time constant of the arrival-rate meter."""
    fixed_window_s: float | None = Field(default=None, ge=0)
    """Replace the adaptive window with a fixed one (benchmarks compare the two)."""

    long_batch_s: float | None = Field(default=1.0, gt=0)
    """A version whose one-row batch is predicted to take longer than this runs long work:
    its batches never take a replica's last free batch slot (of several), so another
    tenant's short call never waits out someone's multi-second handler, whoever is active.
    None: long work may take every slot."""
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
    """How long one read of the job stream waits for new items."""
    job_redis_timeout_s: float = Field(default=2.0, gt=0)
    """Longest one call to the jobs Redis may take."""
    job_shed_pause_s: float = Field(default=1.0, gt=0)
    """The worker takes no job items within this long of a tenant's item being refused."""

    # Coalescing and cache
    coalesce: bool = True
    """Identical in-flight items share one execution (off: every item runs; benchmarks compare)."""
    max_waiters: int = Field(default=1024, ge=1)
    """Most callers sharing one execution; more start a new one."""
    cache_ttl_s: float = Field(default=60.0, gt=0)
    """How long a cached answer of a cacheable version is served again."""
    cache_max_entries: int = Field(default=10000, ge=1)
    """Answers the cache keeps (the least recently used go first)."""

    # Dispatch
    max_inflight_per_node: int = Field(default=0, ge=0)
    """Batches in flight per node; 0 follows each node's own capacity (NodeInfo): more
    would only queue at the node while the next batch, held here, could still grow."""
    max_tenant_inflight_per_node: int = Field(default=0, ge=0)
    """Batches one tenant may have in flight per node; 0: one on a CPU node (the rest of its
    slots are for other tenants), all of them on a GPU (``ReplicaDirectory.tenant_slots``)."""
    max_attempts: int = Field(default=3, ge=1)
    """Nodes one batch is tried on (the failing ones' breakers count it) within its deadline."""
    retry_backoff_s: float = Field(default=0.005, ge=0)
    """Wait before the first retry of a batch, doubling with each one."""
    breaker_threshold: int = Field(default=3, ge=1)
    """Failures in a row that open a node's breaker (it gets no batches)."""
    breaker_cooldown_s: float = Field(default=2.0, gt=0)
    """How long an open breaker waits before one batch tries the node again."""
    batch_timeout_factor: float = Field(default=4.0, gt=1)
    """A batch may take this many times its predicted latency (and at least
    ``min_batch_timeout_s``) before its node is probed; a node that answers neither is hung:
    its breaker opens and the batch is retried on another replica within the deadline."""
    min_batch_timeout_s: float = Field(default=1.0, gt=0)
    """The shortest a batch waits before its node is probed (see batch_timeout_factor)."""
    liveness_probe_timeout_s: float = Field(default=0.5, gt=0)
    """How long a probed node (NodeInfo) has to answer before it counts as hung."""
    dead_letters_per_s: float = Field(default=5.0, gt=0)
    """Rate limit of dead-letter writes (bursts up to this many)."""
    drain_timeout_s: float = Field(default=30.0, ge=0)
    """How long SIGTERM waits for queued and running items before the batcher exits."""
    # Loads on demand
    load_on_demand: bool = True
    """Load a version that no node serves when a request wants it, on the node with room
    (evicting that node's least recently used idle, unpinned versions if it must); the
    request waits for it within its deadline. Off: such a request is refused UNAVAILABLE."""
    demand_load_timeout_s: float = Field(default=300.0, gt=0)
    """How long one load on demand may take on its node (fetch, load, warm-up); requests
    wait for it only within their own deadlines."""
    demand_retry_s: float = Field(default=10.0, gt=0)
    """After a load on demand failed (no room anywhere, a broken artifact), how long its
    refusal answers the version's requests before a load is tried again."""
    hold_for_node: bool = False
    """With no live node at all (a pool scaled to zero), hold requests within their
    deadlines until one registers, then load what they want, instead of refusing them
    UNAVAILABLE at once. Their queue depth is what wakes the pool (the chart sets this with
    a pool's ``keda.scaleToZero``)."""
    scale_out_after_s: float = Field(default=0.0, ge=0)
    """Load one more replica of a version, where it fits without evicting anything, once
    its oldest queued item has waited this long with every replica busy (0: never)."""

    @model_validator(mode="after")
    def _agree(self) -> BatcherSettings:
        if self.max_queue_rows > self.max_total_rows:
            raise ValueError("FERRYMAN_BATCHER_MAX_QUEUE_ROWS may not exceed FERRYMAN_BATCHER_MAX_TOTAL_ROWS")
        if self.retry_after_min_s > self.retry_after_max_s:
            raise ValueError(
                "FERRYMAN_BATCHER_RETRY_AFTER_MIN_S may not exceed FERRYMAN_BATCHER_RETRY_AFTER_MAX_S"
            )
        if not self.load_on_demand and (self.hold_for_node or self.scale_out_after_s):
            raise ValueError(
                "FERRYMAN_BATCHER_HOLD_FOR_NODE and FERRYMAN_BATCHER_SCALE_OUT_AFTER_S load versions on "
                "demand: they need FERRYMAN_BATCHER_LOAD_ON_DEMAND"
            )
        return self
