"""OTLP metrics beside the Prometheus endpoint: with ``OTEL_METRICS_EXPORTER=otlp`` a
service pushes its metrics registry to an OTLP receiver every
``OTEL_METRIC_EXPORT_INTERVAL`` ms (60 s by default), over gRPC or ``http/protobuf``.

The services keep one set of instruments (prometheus_client); this translates a scrape of
it, so both outlets always carry the same numbers. Names stay the Prometheus family names
without the ``_total`` suffix (an OTLP monotonic sum; a collector's Prometheus exporter adds
it back, so dashboards read the same series either way). Temporality is cumulative, as a
scrape's is. Histograms carry no min/max (Prometheus does not record them), sent as the SDK
sends them when it records none: +inf and -inf. Endpoint, headers, TLS and timeout come from
the exporter's own ``OTEL_EXPORTER_OTLP_[METRICS_]*`` variables.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricExporter,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric as Family

from ferryman_server.kernel.metrics_http import with_process_metrics
from ferryman_server.kernel.telemetry import otlp_protocol, resource, sdk_disabled

log = logging.getLogger("ferryman.metrics")

DEFAULT_INTERVAL_MS = 60_000.0
"""The OpenTelemetry specification's default for OTEL_METRIC_EXPORT_INTERVAL."""
DEFAULT_TIMEOUT_MS = 30_000.0
FINAL_PUSH_S = 2.0
NS_PER_S = 1_000_000_000
MS_PER_S = 1000
SCOPE = InstrumentationScope("ferryman")
Labels = tuple[tuple[str, str], ...]


def otlp_metrics_enabled() -> bool:
    """Whether ``OTEL_METRICS_EXPORTER`` names ``otlp`` (unset: Prometheus only)."""
    exporters = {e.strip() for e in os.environ.get("OTEL_METRICS_EXPORTER", "").split(",")}
    return "otlp" in exporters and not sdk_disabled()


def _milliseconds(variable: str, default: float) -> float:
    raw = os.environ.get(variable, "").strip()
    value = float(raw) if raw else default
    if value <= 0:
        raise ValueError(f"{variable} must be a positive number of milliseconds, not {raw!r}")
    return value


def _key(labels: dict[str, str]) -> Labels:
    return tuple(sorted((k, v) for k, v in labels.items() if k != "le"))


def _created(family: Family, suffix: str = "_created") -> dict[Labels, int]:
    return {_key(s.labels): int(s.value * NS_PER_S) for s in family.samples if s.name == family.name + suffix}


def _numbers(family: Family, sample_name: str, start_ns: int, now_ns: int) -> list[NumberDataPoint]:
    created = _created(family)
    return [
        NumberDataPoint(
            attributes=dict(_key(s.labels)),
            start_time_unix_nano=created.get(_key(s.labels), start_ns),
            time_unix_nano=now_ns,
            value=s.value,
        )
        for s in family.samples
        if s.name == sample_name
    ]


def _histogram_points(family: Family, start_ns: int, now_ns: int) -> list[HistogramDataPoint]:
    buckets: dict[Labels, list[tuple[float, float]]] = defaultdict(list)
    totals: dict[Labels, float] = {}
    counts: dict[Labels, float] = {}
    for s in family.samples:
        if s.name == family.name + "_bucket":
            buckets[_key(s.labels)].append((float(s.labels["le"]), s.value))
        elif s.name == family.name + "_sum":
            totals[_key(s.labels)] = s.value
        elif s.name == family.name + "_count":
            counts[_key(s.labels)] = s.value
    created = _created(family)
    points = []
    for labels, cumulative in buckets.items():
        cumulative.sort()
        values = [int(v) for _, v in cumulative]
        points.append(
            HistogramDataPoint(
                attributes=dict(labels),
                start_time_unix_nano=created.get(labels, start_ns),
                time_unix_nano=now_ns,
                count=int(counts.get(labels, values[-1])),
                sum=totals.get(labels, 0.0),
                # Prometheus buckets are cumulative, OTLP's are per bucket.
                bucket_counts=[b - a for a, b in zip([0, *values], values, strict=False)],
                explicit_bounds=[le for le, _ in cumulative if not math.isinf(le)],
                min=math.inf,
                max=-math.inf,
            )
        )
    return points


def translate(families: Iterable[Family], start_ns: int, now_ns: int) -> list[Metric]:
    """OTLP metrics of a Prometheus scrape (counters, gauges, histograms; other kinds are
    not used by the services and are left out). ``start_ns`` stands in for series without a
    ``_created`` time."""
    metrics = []
    for family in families:
        data: Sum | Gauge | Histogram
        if family.type == "counter":
            points = _numbers(family, family.name + "_total", start_ns, now_ns)
            data = Sum(points, AggregationTemporality.CUMULATIVE, is_monotonic=True)
        elif family.type == "gauge":
            data = Gauge(_numbers(family, family.name, start_ns, now_ns))
        elif family.type == "histogram":
            data = Histogram(_histogram_points(family, start_ns, now_ns), AggregationTemporality.CUMULATIVE)
        else:
            continue
        if data.data_points:
            metrics.append(Metric(family.name, family.documentation, family.unit, data))
    return metrics


def metric_exporter() -> MetricExporter:
    """The OTLP metric exporter of the configured protocol."""
    if otlp_protocol("METRICS") == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpExporter

        return HttpExporter()
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcExporter

    return GrpcExporter()


class OtlpMetricsPusher:
    """Pushes a registry in a daemon thread (the exporters block), and once more on stop so
    a process that ends between pushes loses nothing it counted."""

    def __init__(self, registry: CollectorRegistry, resource_: Resource, exporter: MetricExporter) -> None:
        self._registry = registry
        self._resource = resource_
        self._exporter = exporter
        self._interval_s = _milliseconds("OTEL_METRIC_EXPORT_INTERVAL", DEFAULT_INTERVAL_MS) / MS_PER_S
        self._timeout_ms = _milliseconds("OTEL_METRIC_EXPORT_TIMEOUT", DEFAULT_TIMEOUT_MS)
        self._start_ns = time.time_ns()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="otlp-metrics", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def push(self, timeout_ms: float | None = None) -> bool:
        """Export one scrape now (within ``timeout_ms``, else OTEL_METRIC_EXPORT_TIMEOUT);
        whether the receiver took it."""
        metrics = translate(self._registry.collect(), self._start_ns, time.time_ns())
        data = MetricsData([ResourceMetrics(self._resource, [ScopeMetrics(SCOPE, metrics, "")], "")])
        try:
            result = self._exporter.export(data, timeout_millis=timeout_ms or self._timeout_ms)
        except Exception:
            log.exception("exporting metrics over OTLP failed")
            return False
        return result.name == "SUCCESS"

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.push()

    def stop(self) -> None:
        """The last push, bounded by FINAL_PUSH_S: a receiver that is down must not hold a
        stopping service past its termination grace (the export timeout is 30 s)."""
        self._stop.set()
        final_ms = min(self._timeout_ms, FINAL_PUSH_S * MS_PER_S)
        self._thread.join(final_ms / MS_PER_S)
        if not self._thread.is_alive():  # else a push is still under way, and it waits on that one
            self.push(final_ms)
        self._exporter.shutdown()


@contextmanager
def otlp_metrics(registry: CollectorRegistry, service: str) -> Iterator[OtlpMetricsPusher | None]:
    """Push ``registry`` over OTLP for the block when ``OTEL_METRICS_EXPORTER=otlp``."""
    if not otlp_metrics_enabled():
        yield None
        return
    with_process_metrics(registry)
    pusher = OtlpMetricsPusher(registry, resource(service), metric_exporter())
    pusher.start()
    try:
        yield pusher
    finally:
        pusher.stop()
