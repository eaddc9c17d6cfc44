"""The standard OpenTelemetry variables as an operator sets them: OTEL_TRACES_EXPORTER
chooses where spans go (otlp, console, none), an unsupported exporter or OTLP protocol is a
one-line error naming the supported ones, and the process_* metrics are added once however
many exporters want them (promtool refuses a family given twice)."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from ferryman_server.kernel.metrics_http import with_process_metrics
from ferryman_server.kernel.telemetry import otlp_protocol, trace_exporters

ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"


@pytest.mark.parametrize(
    ("exporter", "endpoint", "console", "expected"),
    [
        ("", "", False, set()),
        ("", "http://collector:4317", False, {"otlp"}),
        ("", "", True, {"console"}),
        ("none", "http://collector:4317", True, set()),
        ("otlp", "", False, {"otlp"}),
        ("console", "http://collector:4317", False, {"console"}),
        ("otlp, Console", "", False, {"otlp", "console"}),
    ],
)
def test_traces_go_where_otel_traces_exporter_says(
    monkeypatch: pytest.MonkeyPatch, exporter: str, endpoint: str, console: bool, expected: set[str]
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", exporter)
    monkeypatch.setenv(ENDPOINT, endpoint)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    assert trace_exporters(console) == expected


def test_unsupported_exporters_and_protocols_are_one_line_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "zipkin,otlp")
    with pytest.raises(
        ValueError, match=r"^OTEL_TRACES_EXPORTER: zipkin is not supported \(otlp, console, none\)$"
    ):
        trace_exporters(False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    with pytest.raises(ValueError, match="http/json") as refused:
        otlp_protocol("TRACES")
    assert "\n" not in str(refused.value) and "grpc" in str(refused.value)


def test_process_metrics_are_added_once() -> None:
    registry = CollectorRegistry()
    for _ in range(3):  # the Prometheus endpoint, the OTLP pusher, a co-hosted service
        with_process_metrics(registry)
    text = generate_latest(registry).decode()
    assert text.count("# TYPE process_cpu_seconds_total counter") == 1, text
