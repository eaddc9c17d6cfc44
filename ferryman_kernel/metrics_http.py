"""The Prometheus endpoint every service can expose (``--metrics-listen host:port``)."""

from __future__ import annotations

from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server


def serve_metrics(listen: str, registry: CollectorRegistry) -> WSGIServer | None:
    """Serve ``registry`` at http://listen/metrics in a daemon thread, with the standard
    ``process_*`` metrics (CPU, memory, open files, start time) beside it; None when
    ``listen`` is empty."""
    if not listen:
        return None
    ProcessCollector(registry=registry)
    host, _, port = listen.rpartition(":")
    server, _thread = start_http_server(int(port), addr=host or "0.0.0.0", registry=registry)
    return server
