"""The rollout controller process: ``ferryman serve rollouts`` (and a child of ``ferryman up``).
It serves only health; its work is the check loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ferryman_server.kernel.config import CommonSettings
from ferryman_server.kernel.runtime import ServiceSpec, run_service
from ferryman_server.registry.db import make_engine
from ferryman_server.registry.reader import RegistryReader
from ferryman_server.registry.writer import RegistryWriter
from ferryman_server.rollouts.capacity import CapacityForecaster, prometheus_history
from ferryman_server.rollouts.controller import RolloutController
from ferryman_server.rollouts.metrics import RolloutMetrics
from ferryman_server.rollouts.settings import RolloutSettings
from ferryman_server.rollouts.sources import prometheus, router_metrics

MAX_MESSAGE_BYTES = 64 * 1024


async def serve_rollouts(
    settings: RolloutSettings,
    common: CommonSettings,
    stop: asyncio.Event | None = None,
    on_ready: Callable[[str], None] | None = None,
) -> int:
    """Run the controller until SIGTERM/SIGINT (or, when given, until ``stop`` is set)."""
    if not settings.router_metrics and not settings.prometheus_url:
        raise ValueError("the rollout controller reads --router-metrics URLs or a --prometheus-url")
    metrics = RolloutMetrics()
    spec = ServiceSpec(
        name="rollouts",
        listen=settings.listen,
        services=[],
        max_message_bytes=MAX_MESSAGE_BYTES,
        internal=True,
        metrics_listen=settings.metrics_listen,
        metrics=metrics.registry,
    )
    async with run_service(spec, common, stop) as rt:
        engine = make_engine(common.resolved_database_url())
        rt.on_close(engine.dispose)
        controller = RolloutController(
            RegistryWriter(engine, actor="rollout-controller"),
            RegistryReader(engine),
            prometheus(settings.prometheus_url)
            if settings.prometheus_url
            else router_metrics(settings.router_metrics),
            metrics,
            heartbeat_timeout_s=common.heartbeat_timeout_s,
        )
        loops = [asyncio.create_task(controller.run(rt.stop, settings.check_s))]
        if settings.forecast_pools:
            forecaster = CapacityForecaster(
                settings.forecast_pools,
                prometheus_history(settings.prometheus_url),
                settings.capacity_policy(),
                metrics,
            )
            loops.append(asyncio.create_task(forecaster.run(rt.stop, settings.forecast_s)))
        await rt.serve(on_ready)
        await asyncio.gather(*loops)
    return 0
