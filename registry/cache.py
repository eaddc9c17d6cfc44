"""The services' cached view of the registry, refreshed in the background.

The snapshot reloads when the config revision moves; node readiness is re-read on
every refresh. A registry outage leaves the last good copy in place.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from sqlalchemy import Engine

from ferryman_server.registry.snapshot import ConfigSnapshot, load_snapshot, read_revision, ready_versions

log = logging.getLogger("ferryman.registry.cache")


class SnapshotCache:
    def __init__(self, engine: Engine, refresh_s: float, heartbeat_timeout_s: float) -> None:
        self._engine = engine
        self._refresh_s = refresh_s
        self._heartbeat_timeout_s = heartbeat_timeout_s
        self.snapshot = ConfigSnapshot(revision=-1)
        self.ready: dict[str, list[tuple[str, str]]] = {}
        self.loaded = asyncio.Event()
        self.healthy = False
        """False while the last refresh failed (serving on the last good copy)."""

    async def refresh(self) -> None:
        revision = await asyncio.to_thread(read_revision, self._engine)
        if revision != self.snapshot.revision:
            self.snapshot = await asyncio.to_thread(load_snapshot, self._engine)
        self.ready = await asyncio.to_thread(ready_versions, self._engine, self._heartbeat_timeout_s)
        self.healthy = True
        self.loaded.set()

    def is_ready(self, model: str, version: str) -> bool:
        return bool(self.ready.get(f"{model}:{version}"))

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.refresh()
            except Exception as exc:
                if self.healthy:
                    log.warning("registry unreachable, serving on the last good config: %s", exc)
                elif not self.loaded.is_set():  # a service waiting on its first config says why
                    log.warning("registry unreachable, no config loaded yet: %s", exc)
                self.healthy = False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self._refresh_s)
