"""Run a real service (grpc.aio server) in a background thread with its own event loop,
so synchronous tests can talk to it over real gRPC on a free port."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Iterator

ServiceMain = Callable[[asyncio.Event, Callable[[str], None]], Awaitable[int]]

START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0


class ServiceThread:
    """Start with ``start()`` (returns the address it serves on), end with ``stop()``."""

    def __init__(self, main: ServiceMain, name: str = "service") -> None:
        self._main = main
        self._ready = threading.Event()
        self._address = ""
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        async def runner() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            await self._main(self._stop, self._on_ready)

        try:
            asyncio.run(runner())
        except BaseException as exc:
            self._error = exc
        finally:
            self._ready.set()

    def _on_ready(self, address: str) -> None:
        self._address = address
        self._ready.set()

    def start(self, timeout: float = START_TIMEOUT_S) -> str:
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError("service did not become ready")
        if self._error is not None:
            raise RuntimeError("service failed to start") from self._error
        if not self._address:
            raise RuntimeError("service exited before it was ready")
        return self._address

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError("service did not stop")


@contextlib.contextmanager
def own_threads(threads: list[ServiceThread]) -> Iterator[None]:
    """Services appended to ``threads`` inside the block (a test's own routers on a session's
    platform) are stopped, newest first, and removed when it ends."""
    first = len(threads)
    try:
        yield
    finally:
        while len(threads) > first:
            threads.pop().stop()
