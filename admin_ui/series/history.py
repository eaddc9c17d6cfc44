"""The console's own metrics history, for when no Prometheus is configured: a background
thread scrapes the services' /metrics and keeps them as columns of floats, bounded."""

from __future__ import annotations

import logging
import math
import threading
import time
from array import array
from collections.abc import Callable

from ferryman_server.admin_ui.series.promql import Columns, Labels
from ferryman_server.kernel.scrape import scrape

log = logging.getLogger(__name__)

FULL_RESOLUTION_S = 3600.0
"""The last hour keeps every scrape."""
COARSE_STEP_S = 60.0
"""Older scrapes are kept one a minute (a 6 h or 24 h chart takes rates over minutes anyway)."""
MAX_SCRAPES = 4096
"""Scrapes held before thinning: past it, older ones are thinned to one a minute (and halved,
were that not enough), so a day at 5 s fits in ~2,100 columns of 8-byte floats per series."""


class ScrapeHistory:
    """Scrapes ``urls`` every ``interval_s`` and keeps what ``reach_s`` asks for, bounded."""

    def __init__(
        self,
        urls: list[str],
        interval_s: float,
        reach_s: float,
        fetch: Callable[[list[str]], dict[tuple[str, Labels], float]] = scrape,
    ) -> None:
        self.urls, self.interval_s, self.reach_s = urls, interval_s, reach_s
        self._fetch = fetch
        self._lock = threading.Lock()
        self._times: list[float] = []
        self._metrics: dict[str, dict[Labels, array[float]]] = {}
        self._generation = 0
        self.last_error = ""
        self._stop = threading.Event()

    def start(self) -> ScrapeHistory:
        threading.Thread(target=self._run, name="console-scrapes", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.scrape_once()
            self._stop.wait(self.interval_s)

    def scrape_once(self) -> None:
        now = time.time()
        try:
            samples = self._fetch(self.urls)
        except OSError as exc:  # a service down or restarting: a gap, not an end
            self.last_error = str(exc)
            log.debug("console scrape failed: %s", exc)
            return
        self.last_error = ""
        metrics: dict[str, dict[Labels, float]] = {}
        for (name, labels), value in samples.items():
            metrics.setdefault(name, {})[tuple(sorted((("__name__", name), *labels)))] = value
        self.add(now, metrics)

    def add(self, at: float, metrics: dict[str, dict[Labels, float]]) -> None:
        with self._lock:
            n = len(self._times)
            for name, series in metrics.items():
                known = self._metrics.setdefault(name, {})
                for labels, value in series.items():
                    if labels not in known:  # a new series: no value before now
                        known[labels] = array("d", [math.nan] * n)
                    known[labels].append(value)
            for name, known in self._metrics.items():
                absent = metrics.get(name, {})
                for labels, column in known.items():
                    if labels not in absent:
                        column.append(math.nan)
            self._times.append(at)
            if len(self._times) > MAX_SCRAPES or self._times[0] < at - self.reach_s - FULL_RESOLUTION_S:
                self._thin(at)

    def _thin(self, now: float) -> None:
        """Rebuild with fewer scrapes (new arrays: a reader's view keeps the old ones)."""
        recent, last = now - FULL_RESOLUTION_S, -math.inf
        keep: list[int] = []
        for i, t in enumerate(self._times):
            if t < now - self.reach_s:
                continue
            if t >= recent or t - last >= COARSE_STEP_S:
                keep.append(i)
                last = t
        while len(keep) > MAX_SCRAPES // 2:
            keep = keep[::2]
        self._times = [self._times[i] for i in keep]
        metrics: dict[str, dict[Labels, array[float]]] = {}
        for name, known in self._metrics.items():
            for labels, column in known.items():
                kept = array("d", (column[i] for i in keep))
                if any(not math.isnan(v) for v in kept):  # a series gone for the whole reach goes
                    metrics.setdefault(name, {})[labels] = kept
        self._metrics = metrics
        self._generation += 1

    def view(self) -> Columns:
        """What a query reads: consistent as of now, whatever later scrapes append."""
        with self._lock:
            metrics = {name: dict(known) for name, known in self._metrics.items()}
            return Columns(list(self._times), metrics, self._generation)
