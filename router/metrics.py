"""The router's Prometheus metrics (see docs/metrics.md)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from ferryman.v1 import common_pb2
from ferryman_server.kernel.metrics_catalog import TPOT_BUCKETS, TTFT_BUCKETS

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
OTHER_TENANTS = "other"


PREDICT = "predict"
GENERATE = "generate"
"""The ``kind`` of a request in ``ferryman_request_latency_seconds``."""


class RouterMetrics:
    """Per-request metrics; tenant labels are bounded so cardinality stays bounded."""

    def __init__(self, max_tenant_labels: int) -> None:
        self.registry = CollectorRegistry()
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self._max_tenants = max_tenant_labels
        self._tenants: set[str] = set()
        labels = ["tenant", "model", "version", "code", "protocol"]
        self.requests = Counter(
            "ferryman_requests", "Requests answered, by outcome.", labels, registry=self.registry
        )
        self.latency = Histogram(
            "ferryman_request_latency_seconds",
            "Time from arrival to answer at the router, by kind: predict (an answer) or generate "
            "(a whole stream: generations are judged by TTFT and TPOT, never by this).",
            [*labels, "kind"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.service = Histogram(
            "ferryman_request_service_seconds",
            "Time from arrival to answer at the router, less the wait in the batcher's queue, of "
            "answered requests: what a version itself costs, whatever share of traffic it gets "
            "(a canary with a small share waits longer for its batches to fill).",
            ["model", "version"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.ttft = Histogram(
            "ferryman_router_ttft_seconds",
            "Time from a generation's arrival at the router to its first token leaving it: what "
            "the tenant waits (quota, batcher and node queues included); the generation SLOs.",
            ["model", "version"],
            buckets=TTFT_BUCKETS,
            registry=self.registry,
        )
        self.tpot = Histogram(
            "ferryman_router_tpot_seconds",
            "Mean time per output token after the first, as the router sent them, one sample per "
            "generation that finished.",
            ["model", "version"],
            buckets=TPOT_BUCKETS,
            registry=self.registry,
        )
        self.quota_decisions = Counter(
            "ferryman_quota_decisions",
            "Quota verdicts, by decision.",
            ["tenant", "decision"],
            registry=self.registry,
        )
        self.tokens = Counter(
            "ferryman_tokens",
            "Tokens charged, by direction.",
            ["tenant", "model", "direction"],
            registry=self.registry,
        )
        self.cost = Counter(
            "ferryman_cost_usd", "US dollars charged.", ["tenant", "model"], registry=self.registry
        )
        self.fallbacks = Counter(
            "ferryman_fallbacks",
            "Requests answered by the route's fallback model.",
            ["tenant", "model"],
            registry=self.registry,
        )

        self.auth_failures = Counter(
            "ferryman_auth_failures",
            "Calls refused for a missing, unknown or revoked API key, by front door.",
            ["protocol"],
            registry=self.registry,
        )
        self.shed = Counter(
            "ferryman_router_shed",
            "Requests refused at the router while their version's batcher queue was too long.",
            ["model", "version"],
            registry=self.registry,
        )

        self.spilled = Counter(
            "ferryman_spilled",
            "Requests refused for load or a rate quota and accepted as durable jobs instead.",
            ["tenant", "model"],
            registry=self.registry,
        )
        self.shadow_compared = Counter(
            "ferryman_shadow_compared",
            "Shadowed requests by whether the shadow version's answer matched the live one "
            "(same, differ, failed).",
            ["model", "version", "result"],
            registry=self.registry,
        )
        self.shadow_skipped = Counter(
            "ferryman_shadow_skipped",
            "Requests not mirrored to the shadow version: as many shadows as allowed were running.",
            ["model", "version"],
            registry=self.registry,
        )

        self.limited = Counter(
            "ferryman_router_limited",
            "Requests refused at the door by the adaptive concurrency limit.",
            registry=self.registry,
        )
        self.stale = Counter(
            "ferryman_router_stale",
            "Requests refused on arrival: they waited to be read until not even the fastest "
            "answer yet could make their deadline.",
            registry=self.registry,
        )
        self.concurrency_limit = Gauge(
            "ferryman_router_concurrency_limit",
            "Requests the router admits in flight at once (adaptive).",
            registry=self.registry,
        )

    def tenant(self, name: str) -> str:
        """The label for a tenant: its name for the first N tenants seen, then ``other``."""
        if name in self._tenants:
            return name
        if len(self._tenants) < self._max_tenants:
            self._tenants.add(name)
            return name
        return OTHER_TENANTS

    def child(self, metric: Counter | Histogram, *values: str) -> Any:
        """``metric.labels(*values)``, cached: labels() validates on every call, and the hot
        path asks for the same few children per request (label sets are bounded)."""
        key = (id(metric), values)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*values)
        return found

    def observe(
        self,
        tenant: str,
        model: str,
        version: str,
        code: str,
        protocol: str,
        seconds: float,
        kind: str,
        exemplar: dict[str, str] | None = None,
    ) -> None:
        """One answered request; ``protocol`` names the front door it came through, ``kind``
        whether it was a prediction or a generation (``PREDICT``, ``GENERATE``), ``exemplar``
        the trace it was recorded in (OpenMetrics exemplars: a latency point leads to it)."""
        values = (self.tenant(tenant), model, version or "-", code, protocol)
        self.child(self.requests, *values).inc()
        self.child(self.latency, *values, kind).observe(seconds, exemplar)

    def served(self, tenant: str, model: str, usage: common_pb2.Usage, fallback_of: str = "") -> None:
        """Tokens and cost of an answered request; ``fallback_of`` names the model it fell back from."""
        label = self.tenant(tenant)
        self.child(self.tokens, label, model, "input").inc(usage.input_tokens)
        self.child(self.tokens, label, model, "output").inc(usage.output_tokens)
        self.child(self.cost, label, model).inc(usage.cost_usd)
        if fallback_of:
            self.child(self.fallbacks, label, fallback_of).inc()
