"""``ferryman top``'s arithmetic over two scrapes."""

from __future__ import annotations

import math

import pytest

from ferryman_server.kernel.scrape import Samples, quantile, rows, tenant_usage


def latency(model: str, counts: dict[str, float], code: str = "OK") -> Samples:
    labels = (("code", code), ("model", model), ("tenant", "t"), ("version", "1"))
    return {
        ("ferryman_request_latency_seconds_bucket", tuple(sorted((*labels, ("le", le))))): c
        for le, c in counts.items()
    }


def test_quantile_interpolates_within_buckets() -> None:
    buckets = {0.01: 50.0, 0.1: 90.0, 1.0: 100.0, math.inf: 100.0}
    assert quantile(buckets, 0.5) == pytest.approx(0.01)
    assert quantile(buckets, 0.9) == pytest.approx(0.1)
    assert quantile(buckets, 0.95) == pytest.approx(0.55)
    assert math.isnan(quantile({}, 0.5))


def test_rows_from_two_scrapes() -> None:
    ok = (("code", "OK"), ("model", "mlp"), ("tenant", "t"), ("version", "1"))
    bad = (("code", "INTERNAL"), ("model", "mlp"), ("tenant", "t"), ("version", "1"))
    fill = (("model", "mlp"), ("version", "1"))
    before: Samples = {
        ("ferryman_requests_total", ok): 10,
        ("ferryman_requests_total", bad): 0,
        ("ferryman_batch_fill_ratio_sum", fill): 1.0,
        ("ferryman_batch_fill_ratio_count", fill): 2,
    }
    after: Samples = {
        ("ferryman_requests_total", ok): 30,
        ("ferryman_requests_total", bad): 2,
        ("ferryman_batch_fill_ratio_sum", fill): 3.0,
        ("ferryman_batch_fill_ratio_count", fill): 6,
    }
    after.update(latency("mlp", {"0.01": 11, "0.1": 22, "+Inf": 22}))
    (row,) = rows(before, after, seconds=2.0)
    assert row.model == "mlp" and row.qps == pytest.approx(11) and row.errors_per_s == pytest.approx(1)
    assert row.fill == pytest.approx(0.5)
    assert 0.0 < row.p50_s <= 0.01 < row.p99_s <= 0.1


def test_tenant_usage_sums_tokens_by_direction_and_spend() -> None:
    samples = {
        ("ferryman_tokens_total", (("direction", "input"), ("model", "smollm2"), ("tenant", "a"))): 40.0,
        ("ferryman_tokens_total", (("direction", "output"), ("model", "smollm2"), ("tenant", "a"))): 160.0,
        ("ferryman_cost_usd_total", (("model", "smollm2"), ("tenant", "a"))): 0.002,
        ("ferryman_requests_total", (("model", "smollm2"), ("tenant", "a"))): 3.0,
    }
    (row,) = tenant_usage(samples)
    assert (row.tenant, row.model, row.input_tokens, row.output_tokens) == ("a", "smollm2", 40.0, 160.0)
    assert row.cost_usd == 0.002
