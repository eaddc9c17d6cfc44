"""Closed-loop load through the SDK (its retries on), for tests that break things under it."""

from __future__ import annotations

import threading
import time

import numpy as np

from ferryman.sdk.client import Client
from ferryman.sdk.errors import FerrymanError

LOAD_TIMEOUT_S = 30.0
PAUSE_S = 0.02
FEATURES = 512


class SdkLoad:
    """``clients`` threads sending distinct ``mlp`` rows to ``target`` until stopped,
    counting what was answered and what failed."""

    def __init__(self, target: str, key: str, clients: int, pause_s: float = PAUSE_S) -> None:
        self.ok = 0
        self.failed: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._pause_s = pause_s
        self._threads = [threading.Thread(target=self._run, args=(target, key)) for _ in range(clients)]
        for thread in self._threads:
            thread.start()

    def _run(self, target: str, key: str) -> None:
        rng = np.random.default_rng()
        with Client(target, key, timeout=LOAD_TIMEOUT_S) as client:
            while not self._stop.is_set():
                try:
                    client.predict("mlp", rng.random((1, FEATURES), np.float32))
                    with self._lock:
                        self.ok += 1
                except FerrymanError as exc:
                    with self._lock:
                        self.failed.append(f"{type(exc).__name__}: {exc}")
                time.sleep(self._pause_s)

    def answered_after(self, count: int, within_s: float) -> float:
        """Seconds until ``count`` more requests are answered (fails past ``within_s``)."""
        started, target = time.monotonic(), self.ok + count
        while self.ok < target:
            assert time.monotonic() - started < within_s, f"not serving {within_s} s later"
            time.sleep(self._pause_s)
        return time.monotonic() - started

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()
