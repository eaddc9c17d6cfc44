"""Node settings (env prefix ``FERRYMAN_NODE_``)."""

from __future__ import annotations

import socket
from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from ferryman_server.kernel.config import ListenAddress, MessageBytes, MetricsListen
from ferryman_server.kernel.host import node_torch_threads, usable_cores


class NodeSettings(BaseSettings):
    """Everything a node process is told; CLI flags override the environment."""

    model_config = SettingsConfigDict(
        env_prefix="FERRYMAN_NODE_", extra="ignore", use_attribute_docstrings=True
    )

    listen: ListenAddress = "127.0.0.1:7004"
    advertise: str = ""
    """Address other services dial (default: the listen address)."""
    name: str = Field(default_factory=lambda: socket.gethostname().lower().replace("_", "-"))
    """Unique node name in the registry (default: this host's name)."""
    pool: str = ""
    """Node pool: versions placed on the pool's name load on every node of it."""
    device: str = "auto"
    """auto (CUDA when present), cpu or cuda:N."""
    capacity: int = Field(default=2, ge=1)
    """Batches run at once (worker threads). On a GPU the next batch's host work overlaps
    the current one's kernels; on the CPU the batcher gives one tenant one slot at a time
    (its next batch grows meanwhile) and the other lets another tenant's short request run
    beside a long batch instead of waiting for it (batches are not preemptible)."""
    torch_threads: int = Field(default=0, ge=0)
    """torch intra-op threads on the CPU; 0 sizes them to the host
    (``ferryman_server.kernel.host.node_torch_threads``: every core but the services' share)."""
    use_registry: bool = True
    """Register in the registry, heartbeat, and load this node's placements."""
    heartbeat_interval_s: float = Field(default=2.0, gt=0)
    """How often a registered node tells the registry it is alive (keep it well under
    ``FERRYMAN_HEARTBEAT_TIMEOUT_S``)."""
    placement_refresh_s: float = Field(default=2.0, gt=0)
    """How often a registered node reads its placements and loads versions placed on it
    since it started (one already loading, serving or failed is left as it is)."""
    memory_budget_bytes: int = Field(default=0, ge=0)
    """What this node's versions may hold together, as each measured at load (0: the
    device's memory: a GPU's, or on a CPU the host's, or its container's limit if lower). A
    load that would pass it evicts the least recently used versions nothing pins or runs,
    when its caller allows (a load on demand, a placement), or is refused."""
    evict_after_idle_s: float = Field(default=30.0, ge=0)
    """A version may be evicted only once it has run nothing for this long. A tenant that
    cycles through versions cannot keep pushing out the one another tenant is using: past
    this, its loads are refused for want of room, and retried later."""
    drain_grace_s: float = Field(default=30.0, ge=0)
    """How long SIGTERM waits for in-flight batches."""
    warmup_runs: int = Field(default=2, ge=1)
    """Timed runs per warm-up batch size (the fastest is kept)."""
    profile_smoothing: float = Field(default=0.2, gt=0, le=1)
    """Weight of a live batch in the latency profile's moving average."""
    artifact_cache_bytes: int = Field(default=20 * 1024**3, ge=0)
    """Remote artifacts (s3://, http(s)://, pushed to the registry) kept on this node's disk
    under ``<data dir>/artifact-cache``; past it the least recently used are evicted."""
    artifact_fetch_timeout_s: float = Field(default=60.0, gt=0)
    """How long a remote artifact's connection may stay silent before the fetch fails."""
    artifact_fetch_deadline_s: float = Field(default=3600.0, gt=0)
    """How long a whole fetch may take (a server that trickles bytes fails it as a silent
    one does): the version then FAILS with the reason, and the node's load lane is free."""
    max_message_bytes: MessageBytes = 64 * 1024 * 1024
    metrics_listen: MetricsListen = ""
    generation_slots: int = Field(default=8, ge=1)
    """Generations a causal-LM version runs at once: its KV cache holds this many sequences,
    preallocated at load (SmolLM2 in float16: 23 KB per position, 8 x 2048 positions =
    0.38 GB)."""
    generation_precision: Literal["float16", "bfloat16", "float32"] = "float16"
    """What a causal LM's projection weights and KV cache are held in (activations stay
    float32). float16: half the bytes, and 1.5-2x float32's decode speed on a CPU (FBGEMM's
    fp16 GEMM; float32 where the torch build has no FBGEMM), with logits within the tolerance
    tests/integration/gpu_node/test_generation.py states; on CUDA dense float16 GEMMs.
    bfloat16: dense bfloat16 GEMMs, for CUDA (on a CPU it garbled SmolLM2's answers:
    docs/benchmarks.md); float32 is the exact reference."""
    generation_max_len: int = Field(default=2048, ge=16)
    """Positions per sequence (prompt + generated): a longer request is refused."""
    generation_step_tokens: int = Field(default=256, ge=2)
    """Tokens one step may run (every decode plus prompt chunks): bounds how long a new long
    prompt delays the running sequences' next token. Must exceed generation_slots."""
    generation_admission: Literal["vtc", "fcfs"] = "vtc"
    """Who gets a free generation slot: the tenant with the least service (Virtual Token
    Counter, with a slot kept for each active tenant that holds none), or the oldest
    request (first come, first served: what vLLM and TGI do)."""
    generation_active_s: float = Field(default=5.0, ge=0)
    """How long after its last request a tenant counts as active (a slot is kept for it)."""
    generation_prefix_cache: bool = True
    """Reuse the cache a tenant's finished generation left in its slot for the same tenant's
    next prompt that starts with the same tokens (a chat's system prompt and turns so far are
    computed once). Never across tenants: a shared cache would let one tenant time another's
    prompts."""

    @model_validator(mode="after")
    def _agree(self) -> NodeSettings:
        if self.generation_step_tokens <= self.generation_slots:
            raise ValueError(
                "FERRYMAN_NODE_GENERATION_STEP_TOKENS must exceed FERRYMAN_NODE_GENERATION_SLOTS "
                "(every running sequence decodes one token a step, and prompts need room too)"
            )
        return self

    def sized(self, device_type: str, cores: int | None = None) -> NodeSettings:
        """These settings with what was left to the host (0) sized for a ``device_type``
        device on a host with ``cores`` (this one's by default)."""
        if self.torch_threads or device_type != "cpu":
            return self
        return self.model_copy(
            update={"torch_threads": node_torch_threads(usable_cores() if cores is None else cores)}
        )
