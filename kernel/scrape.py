"""What ``ferryman top`` shows, computed from two scrapes of the services' metrics: pure."""

from __future__ import annotations

import math
import urllib.request
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
SCRAPE_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class ModelRow:
    model: str
    qps: float
    errors_per_s: float
    p50_s: float
    p99_s: float
    fill: float
    """Mean batch fill ratio (0..1), NaN when no batch ran."""


def scrape(urls: list[str]) -> Samples:
    """Every sample of every endpoint, summed where several endpoints report the same series."""
    samples: Samples = {}
    for url in urls:
        with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as response:
            text = response.read().decode()
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                key = (s.name, tuple(sorted(s.labels.items())))
                samples[key] = samples.get(key, 0.0) + s.value
    return samples


def totals(
    samples: Samples,
    name: str,
    by: str = "model",
    code: str | None = None,
    where: dict[str, str] | None = None,
) -> dict[str, float]:
    """Sum of a sample grouped by one label, optionally only one gRPC code and matching labels."""
    out: dict[str, float] = {}
    for (sample, labels), value in samples.items():
        fields = dict(labels)
        if sample != name or (code is not None and fields.get("code") != code):
            continue
        if where and any(fields.get(k) != v for k, v in where.items()):
            continue
        out[fields.get(by, "")] = out.get(fields.get(by, ""), 0.0) + value
    return out


def quantile(buckets: dict[float, float], q: float) -> float:
    """histogram_quantile over cumulative bucket counts (upper bound -> count)."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return math.nan
    rank = q * buckets[bounds[-1]]
    lower, below = 0.0, 0.0
    for bound in bounds:
        if buckets[bound] >= rank:
            if math.isinf(bound):
                return lower
            span = buckets[bound] - below
            return lower + (bound - lower) * ((rank - below) / span if span else 0.0)
        lower, below = bound, buckets[bound]
    return lower


LATENCY = "ferryman_request_latency_seconds"
SERVICE = "ferryman_request_service_seconds"


def latency_buckets(
    samples: Samples, by: str = "model", where: dict[str, str] | None = None, metric: str = LATENCY
) -> dict[str, dict[float, float]]:
    """A router latency histogram's cumulative buckets (upper bound -> count), grouped by one
    label: end to end (``LATENCY``) or less the queue wait (``SERVICE``)."""
    out: dict[str, dict[float, float]] = {}
    bucket_name = f"{metric}_bucket"
    for (sample, labels), value in samples.items():
        fields = dict(labels)
        if sample != bucket_name:
            continue
        if where and any(fields.get(k) != v for k, v in where.items()):
            continue
        group = out.setdefault(fields.get(by, ""), {})
        le = float(fields["le"])
        group[le] = group.get(le, 0.0) + value
    return out


@dataclass(frozen=True)
class TenantUsage:
    tenant: str
    model: str
    input_tokens: float
    output_tokens: float
    cost_usd: float


def tenant_usage(samples: Samples) -> list[TenantUsage]:
    """Tokens (prompt and generated) and spend charged per tenant and model, since start."""
    found: dict[tuple[str, str], list[float]] = {}
    for (name, labels), value in samples.items():
        fields = dict(labels)
        key = (fields.get("tenant", ""), fields.get("model", ""))
        if name == "ferryman_tokens_total":
            slot = 0 if fields.get("direction") == "input" else 1
        elif name == "ferryman_cost_usd_total":
            slot = 2
        else:
            continue
        found.setdefault(key, [0.0, 0.0, 0.0])[slot] += value
    return [TenantUsage(t, m, *values) for (t, m), values in sorted(found.items())]


def rows(before: Samples, after: Samples, seconds: float) -> list[ModelRow]:
    """Per model, over the interval between two scrapes."""

    def rate(name: str, code: str | None = None) -> dict[str, float]:
        a, b = totals(after, name, code=code), totals(before, name, code=code)
        return {m: (a[m] - b.get(m, 0.0)) / seconds for m in a}

    requests, good = rate("ferryman_requests_total"), rate("ferryman_requests_total", "OK")
    fill_sum, fill_count = rate("ferryman_batch_fill_ratio_sum"), rate("ferryman_batch_fill_ratio_count")
    lat_after, lat_before = latency_buckets(after), latency_buckets(before)
    result = []
    for model in sorted(set(requests) | set(fill_count)):
        delta = {le: c - lat_before.get(model, {}).get(le, 0.0) for le, c in lat_after.get(model, {}).items()}
        count = fill_count.get(model, 0.0)
        result.append(
            ModelRow(
                model=model,
                qps=requests.get(model, 0.0),
                errors_per_s=requests.get(model, 0.0) - good.get(model, 0.0),
                p50_s=quantile(delta, 0.5),
                p99_s=quantile(delta, 0.99),
                fill=fill_sum.get(model, 0.0) / count if count else math.nan,
            )
        )
    return result
