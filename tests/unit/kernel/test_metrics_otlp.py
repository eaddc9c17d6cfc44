"""A Prometheus scrape as OTLP metrics: the same numbers, names and labels."""

from __future__ import annotations

import math
import time

import pytest
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    MetricExporter,
    MetricExportResult,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from prometheus_client import CollectorRegistry, Counter
from prometheus_client import Gauge as PromGauge
from prometheus_client import Histogram as PromHistogram

from ferryman_server.kernel.metrics_otlp import (
    NS_PER_S,
    OtlpMetricsPusher,
    otlp_metrics_enabled,
    translate,
)

START_NS = time.time_ns() - NS_PER_S
"""Before any series here is created: their own ``_created`` times come after it."""
NOW_NS = START_NS + 3600 * NS_PER_S


def scrape() -> dict[str, object]:
    registry = CollectorRegistry()
    requests = Counter("ferryman_requests", "Requests.", ["model", "code"], registry=registry)
    requests.labels("mlp", "OK").inc(3)
    requests.labels("mlp", "INVALID_ARGUMENT").inc()
    depth = PromGauge("ferryman_queue_depth", "Rows queued.", ["model"], registry=registry)
    depth.labels("mlp").set(7)
    latency = PromHistogram(
        "ferryman_latency_seconds", "Latency.", ["model"], buckets=(0.01, 0.1), registry=registry
    )
    for seconds in (0.005, 0.05, 0.05, 5.0):
        latency.labels("mlp").observe(seconds)
    PromGauge("ferryman_unused", "No series yet.", ["model"], registry=registry)
    return {m.name: m for m in translate(registry.collect(), START_NS, NOW_NS)}


def test_counters_are_cumulative_monotonic_sums_named_without_total() -> None:
    metric = scrape()["ferryman_requests"]
    assert isinstance(metric.data, Sum)  # type: ignore[attr-defined]
    data = metric.data  # type: ignore[attr-defined]
    assert data.is_monotonic and data.aggregation_temporality == AggregationTemporality.CUMULATIVE
    values = {dict(p.attributes or {})["code"]: p.value for p in data.data_points}
    assert values == {"OK": 3.0, "INVALID_ARGUMENT": 1.0}
    for point in data.data_points:
        assert dict(point.attributes or {})["model"] == "mlp"
        assert START_NS < point.start_time_unix_nano <= NOW_NS, "the series' own _created time"
        assert point.time_unix_nano == NOW_NS


def test_gauges_and_histograms_keep_their_values() -> None:
    metrics = scrape()
    gauge = metrics["ferryman_queue_depth"].data  # type: ignore[attr-defined]
    assert isinstance(gauge, Gauge) and [p.value for p in gauge.data_points] == [7.0]
    histogram = metrics["ferryman_latency_seconds"].data  # type: ignore[attr-defined]
    assert isinstance(histogram, Histogram)
    (point,) = histogram.data_points
    assert point.attributes == {"model": "mlp"}
    assert list(point.explicit_bounds) == [0.01, 0.1]
    assert list(point.bucket_counts) == [1, 2, 1], "per bucket, not cumulative; the last is +Inf"
    assert point.count == 4 and point.sum == pytest.approx(5.105)
    assert math.isinf(point.min) and math.isinf(point.max), "unknown, as the SDK sends them"


def test_families_without_series_are_left_out() -> None:
    assert "ferryman_unused" not in scrape()


@pytest.mark.parametrize(
    ("env", "enabled"),
    [
        ({}, False),
        ({"OTEL_METRICS_EXPORTER": "otlp"}, True),
        ({"OTEL_METRICS_EXPORTER": "prometheus, otlp"}, True),
        ({"OTEL_METRICS_EXPORTER": "none"}, False),
        ({"OTEL_METRICS_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}, False),
    ],
)
def test_otlp_export_is_opt_in_by_the_standard_variable(
    env: dict[str, str], enabled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OTEL_METRICS_EXPORTER", "OTEL_SDK_DISABLED"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert otlp_metrics_enabled() is enabled


class StuckExporter(MetricExporter):
    """A receiver that is down: every export hangs until its timeout."""

    def __init__(self) -> None:
        super().__init__()
        self.exports = 0
        self.returned = 0

    def export(self, metrics_data: object, timeout_millis: float = 10_000, **_: object) -> MetricExportResult:
        self.exports += 1
        time.sleep(timeout_millis / 1000)
        self.returned += 1
        return MetricExportResult.FAILURE

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **_: object) -> None:
        return None


def test_a_receiver_that_is_down_does_not_hold_a_stopping_service(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "50")
    monkeypatch.setenv("OTEL_METRIC_EXPORT_TIMEOUT", "20000")
    exporter = StuckExporter()
    pusher = OtlpMetricsPusher(CollectorRegistry(), Resource.create({}), exporter)
    pusher.start()
    time.sleep(0.2)  # a push is under way, stuck for 20 s
    pusher.stop()
    assert exporter.returned == 0, "stop waited for the stuck push to give up (20 s)"
    assert exporter.exports == 1, "no second push piles up behind the stuck one"
