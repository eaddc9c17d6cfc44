"""Tracing for every service: one OpenTelemetry tracer provider per process, W3C trace
context through gRPC metadata and through the ``traceparent`` fields of the internal
protos (so a node's batch span can link to every request span in the batch).

Export: as ``OTEL_TRACES_EXPORTER`` says (``otlp``, ``console``, ``none``); unset, OTLP when
``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set, and the
console with ``FERRYMAN_TRACE_CONSOLE=true``. OTLP goes over gRPC or ``http/protobuf``
(``OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL``). The SDK's standard variables hold:
``OTEL_SDK_DISABLED``, ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES``,
``OTEL_TRACES_SAMPLER`` (else ``FERRYMAN_TRACE_SAMPLE_RATIO``, parent-based, so a trace is
kept or dropped whole). Metrics go out over OTLP too with ``OTEL_METRICS_EXPORTER=otlp``
(``ferryman_server.kernel.metrics_otlp``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import INVALID_SPAN, Link, NonRecordingSpan, Span, SpanContext, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

# Above the largest batch any version may declare, so no request link is dropped.
MAX_LINKS = 4096
PROPAGATOR = TraceContextTextMapPropagator()


class TraceSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="FERRYMAN_TRACE_", extra="ignore", use_attribute_docstrings=True
    )

    sample_ratio: float = Field(default=1.0, ge=0.0, le=1.0)
    """Share of root spans (requests) recorded; children follow their parent's choice."""
    console: bool = False
    """Print spans to standard output (to see traces with no collector)."""
    enabled: bool | None = None
    """Record spans. Unset: only when an exporter is configured (OTLP endpoint or console);
    recording spans nobody exports costs the hot path ~10% of its CPU for nothing."""


def _recording() -> bool:
    """Whether this process records spans (an SDK tracer provider is installed)."""
    return isinstance(trace.get_tracer_provider(), TracerProvider)


def sdk_disabled() -> bool:
    """``OTEL_SDK_DISABLED=true``: no spans and no OTLP metrics."""
    return os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"


def resource(service: str) -> Resource:
    """This process's OpenTelemetry resource, for its spans and its OTLP metrics alike."""
    named = bool(os.environ.get("OTEL_SERVICE_NAME"))
    # Resource.create reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES; ours only fills in.
    return Resource.create({} if named else {"service.name": f"ferryman-{service}"})


def otlp_protocol(signal: str) -> str:
    """The OTLP protocol for ``signal`` (``TRACES``, ``METRICS``): ``grpc`` (the default)
    or ``http/protobuf``, from ``OTEL_EXPORTER_OTLP_[SIGNAL_]PROTOCOL``."""
    protocol = (
        os.environ.get(f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "grpc"
    ).strip()
    if protocol not in ("grpc", "http/protobuf"):
        raise ValueError(f"unsupported OTLP protocol {protocol!r}: grpc or http/protobuf")
    return protocol


TRACE_EXPORTERS = ("otlp", "console", "none")
"""What ``OTEL_TRACES_EXPORTER`` may name (comma-separated)."""


def trace_exporters(console: bool) -> frozenset[str]:
    """Where spans go: ``OTEL_TRACES_EXPORTER`` when set (``otlp``, ``console``, ``none``);
    else OTLP when an OTLP endpoint is set, and the console with ``FERRYMAN_TRACE_CONSOLE``.
    Anything else is refused in one line naming what is supported."""
    named = os.environ.get("OTEL_TRACES_EXPORTER", "").strip()
    if named:
        chosen = {e.strip().lower() for e in named.split(",") if e.strip()}
        if unknown := chosen - set(TRACE_EXPORTERS):
            supported = ", ".join(TRACE_EXPORTERS)
            raise ValueError(
                f"OTEL_TRACES_EXPORTER: {', '.join(sorted(unknown))} is not supported ({supported})"
            )
        return frozenset(chosen - {"none"})
    otlp = any(os.environ.get(f"OTEL_EXPORTER_OTLP_{kind}ENDPOINT") for kind in ("", "TRACES_"))
    return frozenset({"otlp"} if otlp else set()) | frozenset({"console"} if console else set())


def setup_tracing(service: str) -> None:
    """Install this process's tracer provider once (a provider already installed stays)."""
    if _recording():
        return
    settings = TraceSettings()
    if sdk_disabled():
        return
    exporters = trace_exporters(settings.console)
    if not (settings.enabled if settings.enabled is not None else exporters):
        return  # the API's no-op tracer: spans don't record, incoming trace context still propagates
    provider = TracerProvider(
        resource=resource(service),
        # None: the SDK reads OTEL_TRACES_SAMPLER (and its _ARG) itself.
        sampler=None
        if os.environ.get("OTEL_TRACES_SAMPLER")
        else ParentBased(TraceIdRatioBased(settings.sample_ratio)),
        span_limits=SpanLimits(max_links=MAX_LINKS),
    )
    if "otlp" in exporters:
        provider.add_span_processor(BatchSpanProcessor(otlp_exporter()))
    if "console" in exporters:
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    trace.set_tracer_provider(provider)


def otlp_exporter() -> SpanExporter:
    """The OTLP span exporter of the configured protocol (``grpc``, the default, or
    ``http/protobuf``); each reads its endpoint, headers and TLS from the OTEL_* variables."""
    if otlp_protocol("TRACES") == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

        return HttpExporter()
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

    return GrpcExporter()


def tracer(name: str) -> trace.Tracer:
    """This process's tracer; the plain no-op one when nothing records (no proxy per call)."""
    return trace.get_tracer(name) if _recording() else trace.NoOpTracer()


def current_span(tracer_: trace.Tracer, name: str, **kwargs: Any) -> AbstractContextManager[Span]:
    """``tracer_.start_as_current_span``, or nothing at all for the no-op tracer ``tracer()``
    hands out when this process records no spans: even a no-op span costs the hot path a
    context switch per request (checked on the tracer, not the global provider, per call)."""
    if isinstance(tracer_, trace.NoOpTracer):
        return nullcontext(INVALID_SPAN)
    return tracer_.start_as_current_span(name, **kwargs)


def context_from_metadata(metadata: Iterable[Any] | None) -> Context:
    """The caller's trace context from gRPC invocation metadata (W3C traceparent)."""
    carrier = {str(k).lower(): v for k, v in (metadata or ()) if isinstance(v, str)}
    return PROPAGATOR.extract(carrier)


def traceparent(span: Span | None = None) -> str:
    """The W3C traceparent of ``span`` (default: the current span), empty when not sampled."""
    context = (span or trace.get_current_span()).get_span_context()
    if not context.is_valid:
        return ""
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def exemplar(span: Span | None = None) -> dict[str, str] | None:
    """The exemplar of an observation made under ``span`` (default: the current span): its
    trace and span ids, so a dashboard's point leads to the trace; None unless sampled."""
    context = (span or trace.get_current_span()).get_span_context()
    if not context.is_valid or not context.trace_flags.sampled:
        return None
    return {"trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}"}


def span_context(header: str) -> SpanContext | None:
    """The remote span a traceparent names, None for anything malformed."""
    parts = header.split("-")
    if len(parts) != 4 or len(parts[1]) != 32 or len(parts[2]) != 16:
        return None
    try:
        trace_id, span_id, flags = int(parts[1], 16), int(parts[2], 16), int(parts[3], 16)
    except ValueError:
        return None
    if not trace_id or not span_id:
        return None
    return SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(flags))


def parent_context(header: str) -> Context | None:
    """A context whose parent is the span a traceparent names (None: start a new trace)."""
    remote = span_context(header)
    return trace.set_span_in_context(NonRecordingSpan(remote)) if remote else None


def links(headers: Sequence[str]) -> list[Link]:
    """One link per distinct valid traceparent."""
    seen: dict[tuple[int, int], Link] = {}
    for header in headers:
        remote = span_context(header)
        if remote is not None:
            seen.setdefault((remote.trace_id, remote.span_id), Link(remote))
    return list(seen.values())
