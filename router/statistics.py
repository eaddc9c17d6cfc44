"""Per-tenant request statistics of each model version, as Triton's ModelStatistics reports
them: counts and summed durations of the requests this router answered. Kept per tenant,
so one tenant never learns how much another uses a shared model."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ferryman.v1 import inference_pb2

NS_PER_S = 1_000_000_000


@dataclass
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, seconds: float) -> None:
        self.add_ns(int(seconds * NS_PER_S))

    def add_ns(self, ns: int) -> None:
        self.count += 1
        self.ns += ns


@dataclass
class VersionStats:
    """One tenant's requests to one version."""

    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)
    compute: Duration = field(default_factory=Duration)
    cache_hit: Duration = field(default_factory=Duration)
    items: int = 0
    last_inference_ms: int = 0
    batch_sizes: dict[int, Duration] = field(default_factory=dict)
    """Compute time by the size of the batch that served the request (at most the
    version's max batch size keys)."""


class Statistics:
    """``VersionStats`` by (tenant, model, version); bounded by tenants x versions, since
    only registered versions are recorded (those that answered, or that a failed request
    pinned)."""

    def __init__(self) -> None:
        self._stats: dict[tuple[str, str, str], VersionStats] = {}

    def _get(self, tenant: str, model: str, version: str) -> VersionStats:
        key = (tenant, model, version)
        found = self._stats.get(key)
        if found is None:
            found = self._stats[key] = VersionStats()
        return found

    def answered(self, tenant: str, response: inference_pb2.PredictResponse, seconds: float) -> None:
        stats = self._get(tenant, response.model, response.version)
        stats.success.add(seconds)
        stats.items += response.usage.items
        stats.last_inference_ms = time.time_ns() // 1_000_000
        timing = response.timing
        if response.cached:
            stats.cache_hit.add(seconds)
            return
        # Every answer passes here, whatever its door: nanoseconds as they are, no timedelta.
        stats.queue.add_ns(timing.queue.ToNanoseconds())
        compute_ns = timing.compute.ToNanoseconds()
        stats.compute.add_ns(compute_ns)
        if timing.batch_size > 0:
            stats.batch_sizes.setdefault(timing.batch_size, Duration()).add_ns(compute_ns)

    def failed(self, tenant: str, model: str, version: str, seconds: float) -> None:
        self._get(tenant, model, version).fail.add(seconds)

    def of(self, tenant: str, model: str) -> dict[str, VersionStats]:
        """The tenant's statistics of ``model`` by version."""
        return {v: s for (t, m, v), s in self._stats.items() if t == tenant and m == model}
