"""Where chart data comes from: a Prometheus (PromQL range queries), or the console's own
scrapes evaluated with the same expressions (``promql.evaluate``)."""

from __future__ import annotations

import json
import math
import urllib.parse
import urllib.request
from typing import Protocol

from admin_ui.series.history import ScrapeHistory
from admin_ui.series.promql import Labels, evaluate

Series = dict[Labels, list[tuple[float, float]]]
PROMETHEUS_TIMEOUT_S = 5.0


class SeriesSource(Protocol):
    """What a chart asks of its data: one expression over a time range."""

    name: str

    def query_range(self, expression: str, start: float, end: float, step: float) -> Series: ...

    def query(self, expression: str, at: float) -> dict[Labels, float]: ...


class PrometheusSource:
    """A Prometheus that scrapes the platform (``FERRYMAN_CONSOLE_PROMETHEUS_URL``)."""

    name = "Prometheus"

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def _get(self, path: str, params: dict[str, str]) -> list[dict[str, object]]:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=PROMETHEUS_TIMEOUT_S) as response:
            body = json.loads(response.read())
        if body.get("status") != "success":
            raise OSError(f"Prometheus said {body.get('error', body.get('status'))}")
        return list(body["data"]["result"]) if "result" in body["data"] else list(body["data"]["alerts"])

    def query_range(self, expression: str, start: float, end: float, step: float) -> Series:
        params = {"query": expression, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:.3f}"}
        out: Series = {}
        for series in self._get("/api/v1/query_range", params):
            labels = tuple(sorted(dict(series["metric"]).items()))  # type: ignore[call-overload]
            points = [(float(t), float(v)) for t, v in series["values"]]  # type: ignore[attr-defined]
            out[labels] = [(t, v) for t, v in points if not math.isnan(v)]
        return out

    def query(self, expression: str, at: float) -> dict[Labels, float]:
        found = self._get("/api/v1/query", {"query": expression, "time": f"{at:.3f}"})
        return {
            tuple(sorted(dict(s["metric"]).items())): float(s["value"][1])  # type: ignore[call-overload, index]
            for s in found
        }

    def firing_alerts(self) -> list[dict[str, object]]:
        """Alerts firing now (from the rules Prometheus was given: the shipped ones)."""
        return [a for a in self._get("/api/v1/alerts", {}) if a.get("state") == "firing"]


class LocalSource:
    """The console's own scrapes (``FERRYMAN_CONSOLE_METRICS_URLS``), kept by ``ScrapeHistory``."""

    name = "the console's own scrapes"

    def __init__(self, history: ScrapeHistory) -> None:
        self.history = history

    def query_range(self, expression: str, start: float, end: float, step: float) -> Series:
        count = int((end - start) // step) + 1
        return evaluate(expression, self.history.view(), [start + i * step for i in range(count)])

    def query(self, expression: str, at: float) -> dict[Labels, float]:
        return {labels: points[-1][1] for labels, points in self.query_range(expression, at, at, 1.0).items()}
