"""Where chart data comes from: a Prometheus (PromQL range queries), or the console's own
scrapes evaluated with the same expressions (``promql.evaluate``)."""

from __future__ import annotations

import json
import math
import threading
import urllib.parse
import urllib.request
from collections import OrderedDict
from typing import Protocol

from ferryman_server.admin_ui.series.history import ScrapeHistory
from ferryman_server.admin_ui.series.promql import Evaluator, Labels, instant, parse

Series = dict[Labels, list[tuple[float, float]]]
PROMETHEUS_TIMEOUT_S = 5.0
CACHED_INSTANTS = 20_000
"""Evaluated instants a console keeps (each a handful of series): every chart of every page
at every range, and then some."""


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
    """The console's own scrapes (``FERRYMAN_CONSOLE_METRICS_URLS``), kept by ``ScrapeHistory``.

    Charts redraw every few seconds over the same range: instants on the step's grid that a
    later scrape has passed are final, so each is evaluated once and kept (bounded), and a
    redraw evaluates only the newest ones."""

    name = "the console's own scrapes"

    def __init__(self, history: ScrapeHistory) -> None:
        self.history = history
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple[str, float, int], dict[Labels, float]] = OrderedDict()

    def query_range(self, expression: str, start: float, end: float, step: float) -> Series:
        view = self.history.view()
        settled = view.times[-1] if view.times else -math.inf
        first, last = math.ceil(start / step), math.floor(end / step)
        times = [k * step for k in range(first, last + 1)]  # the same floats at every redraw
        if not times or times[-1] < end:
            times.append(end)  # the newest value, off the grid
        with self._lock:
            cached = {t: self._cache.get((expression, t, view.generation)) for t in times}
        missing = [t for t, found in cached.items() if found is None]
        node, evaluator = parse(expression), Evaluator(view, missing)
        out: Series = {}
        for t in times:
            found = cached[t]
            if found is None:
                found = instant(evaluator, node, t)
                if t < settled:
                    with self._lock:
                        self._cache[(expression, t, view.generation)] = found
                        while len(self._cache) > CACHED_INSTANTS:
                            self._cache.popitem(last=False)
            for labels, value in found.items():
                out.setdefault(labels, []).append((t, value))
        return out

    def query(self, expression: str, at: float) -> dict[Labels, float]:
        return instant(Evaluator(self.history.view()), parse(expression), at)
