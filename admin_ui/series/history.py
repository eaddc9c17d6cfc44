"""The console's own metrics history, for when no Prometheus is configured: a background
thread scrapes the services' /metrics and keeps a bounded list of scrapes."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from admin_ui.series.promql import Labels, Scrape
from ferryman.top import scrape

log = logging.getLogger(__name__)

MAX_SCRAPES = 2048
"""Scrapes kept at most: past it the older half is thinned to every other scrape, so the last
minutes keep full resolution and a day fits in bounded memory (rates still span each gap)."""


class ScrapeHistory:
    """Scrapes ``urls`` every ``interval_s`` and keeps what ``reach_s`` asks for, bounded."""

    def __init__(
        self,
        urls: list[str],
        interval_s: float,
        reach_s: float,
        fetch: Callable[[list[str]], dict[tuple[str, Labels], float]] = scrape,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.urls, self.interval_s, self.reach_s = urls, interval_s, reach_s
        self._fetch, self._clock = fetch, clock
        self._lock = threading.Lock()
        self._scrapes: list[Scrape] = []
        self.last_error = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> ScrapeHistory:
        self._thread = threading.Thread(target=self._run, name="console-scrapes", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.scrape_once()
            self._stop.wait(self.interval_s)

    def scrape_once(self) -> None:
        now = self._clock()
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
            self._scrapes.append((at, metrics))
            horizon = at - self.reach_s
            while self._scrapes and self._scrapes[0][0] < horizon:
                self._scrapes.pop(0)
            if len(self._scrapes) > MAX_SCRAPES:
                half = len(self._scrapes) // 2
                self._scrapes = self._scrapes[:half:2] + self._scrapes[half:]

    def scrapes(self) -> list[Scrape]:
        with self._lock:
            return list(self._scrapes)

    def covered_s(self) -> float:
        """How many seconds of history there are."""
        with self._lock:
            return self._scrapes[-1][0] - self._scrapes[0][0] if len(self._scrapes) > 1 else 0.0
