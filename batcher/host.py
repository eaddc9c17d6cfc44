"""A batcher's parts, started and stopped together: the service, the generation relay, its
replica directory (refreshed from the registry) and its dead-letter sink. ``serve_batcher`` serves a host
over gRPC; a router in the same process calls one through ``ferryman_server.batcher.local.LocalBatcher``."""

from __future__ import annotations

import asyncio
import logging

from ferryman_server.batcher.dead_letters import DeadLetterSink
from ferryman_server.batcher.dispatcher import Dispatcher
from ferryman_server.batcher.generation import GenerationRelay
from ferryman_server.batcher.jobs import JobWorker
from ferryman_server.batcher.local import LocalBatcher
from ferryman_server.batcher.metrics import BatcherMetrics
from ferryman_server.batcher.replicas import ReplicaDirectory
from ferryman_server.batcher.service import BatcherService
from ferryman_server.batcher.settings import BatcherSettings
from ferryman_server.jobs.port import open_job_queue
from ferryman_server.kernel.config import CommonSettings
from ferryman_server.registry.db import make_engine
from ferryman_server.registry.reader import RegistryReader
from ferryman_server.registry.writer import RegistryWriter

log = logging.getLogger("ferryman.batcher")


class BatcherHost:
    """Build with the settings, ``start()`` before use, ``stop()`` to drain and release."""

    def __init__(self, settings: BatcherSettings, common: CommonSettings, metrics: BatcherMetrics) -> None:
        self.settings = settings
        self._metrics = metrics
        self._engine = make_engine(common.resolved_database_url())
        self.directory = ReplicaDirectory(
            settings,
            RegistryReader(self._engine),
            metrics,
            common.security(),
            refresh_s=common.registry_refresh_s,
            heartbeat_timeout_s=common.heartbeat_timeout_s,
        )
        self._dead_letters = DeadLetterSink(
            RegistryWriter(self._engine, actor="batcher"), settings.dead_letters_per_s
        )
        dead_letters = self._dead_letters
        directory = self.directory
        self.service = BatcherService(
            settings,
            directory,
            metrics,
            lambda finish: Dispatcher(settings, directory, metrics, dead_letters, finish),
        )
        service = self.service
        self.generation = GenerationRelay(directory, settings.max_attempts, lambda: service.accepting)
        self._refresher_stop = asyncio.Event()
        self._refresher: asyncio.Task[None] | None = None
        # Durable jobs, when a store holds them: this batcher runs their items in leftover capacity.
        self._jobs = open_job_queue(common, settings.job_redis_timeout_s)
        self._job_stop = asyncio.Event()
        self._job_worker: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Keep replicas fresh from the registry; wait (a while) for the first read."""
        self._refresher = asyncio.create_task(self.directory.run(self._refresher_stop))
        try:
            await asyncio.wait_for(
                self.directory.refreshed.wait(), timeout=self.directory.heartbeat_timeout_s
            )
        except TimeoutError:
            log.warning("registry not readable yet; starting without replicas")
        if self._jobs is not None:  # after the first read: job items need their versions known
            local = LocalBatcher(self.service, self.generation)
            service = self.service
            worker = JobWorker(self._jobs, local, self.settings, self._metrics, lambda: service.shed_at)
            self._job_worker = asyncio.create_task(worker.run(self._job_stop))

    async def drain(self) -> None:
        """Take no new items (nor job items: those running are taken again by another
        worker); finish the queued ones (up to the drain timeout)."""
        self._job_stop.set()
        if self._job_worker is not None:
            await self._job_worker
        try:
            await asyncio.wait_for(self.service.drain(), timeout=self.settings.drain_timeout_s)
        except TimeoutError:
            log.warning("drain timed out with work still queued")

    async def stop(self) -> None:
        """Release everything (after ``drain``, and after callers stopped coming)."""
        await self.service.close()
        await self._dead_letters.flush()
        self._refresher_stop.set()
        if self._refresher is not None:
            await self._refresher
        await self.directory.close()
        if self._jobs is not None:
            await self._jobs.close()
        self._engine.dispose()
