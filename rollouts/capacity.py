"""The capacity forecaster's loop in the controller process: each pool's demand history from
Prometheus, the forecast (``ferryman_server.rollouts.forecast``), and the replicas it needs
published as ``ferryman_forecast_replicas{pool}``, which a pool's KEDA ScaledObject reads
beside its queue depth (the chart wires both)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ferryman_server.kernel.scrape import SCRAPE_TIMEOUT_S
from ferryman_server.rollouts.forecast import CapacityPolicy, forecast, latest
from ferryman_server.rollouts.metrics import RolloutMetrics

log = logging.getLogger("ferryman.rollouts.capacity")

History = Callable[[str, float, float], Sequence[float | None]]
"""(PromQL, seconds back, step seconds) -> one value a step, oldest first, through now, None
where Prometheus has no sample (blocking; the loop calls it in a thread)."""


def prometheus_history(url: str) -> History:
    """Range queries to the Prometheus at ``url``; a step with no sample stays unknown."""

    def read(query: str, back_s: float, step_s: float) -> list[float | None]:
        end = math.floor(time.time() / step_s) * step_s
        start = end - back_s
        params = {"query": query, "start": start, "end": end, "step": step_s}
        endpoint = f"{url.rstrip('/')}/api/v1/query_range?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(endpoint, timeout=SCRAPE_TIMEOUT_S) as response:
            body = json.loads(response.read())
        if body.get("status") != "success":
            raise OSError(f"Prometheus answered {body.get('errorType')}: {body.get('error')}")
        return series_values(body["data"]["result"], start, step_s, round(back_s / step_s) + 1)

    return read


def series_values(
    result: list[dict[str, Any]], start: float, step_s: float, steps: int
) -> list[float | None]:
    """A range query's matrix summed into ``steps`` values from ``start``; a step no series
    has a sample for is None (a gap in the scrapes, or before the retention), not 0."""
    values: list[float | None] = [None] * steps
    for series in result:
        for at, value in series["values"]:
            index = round((float(at) - start) / step_s)
            if 0 <= index < steps and math.isfinite(float(value)):
                values[index] = (values[index] or 0.0) + float(value)
    return values


class CapacityForecaster:
    """Publishes each pool's forecast replicas."""

    def __init__(
        self,
        pools: Mapping[str, str],
        history: History,
        policy: CapacityPolicy,
        metrics: RolloutMetrics,
    ) -> None:
        self._pools = dict(pools)
        self._history = history
        self._policy = policy
        self._metrics = metrics
        self._back_s = max(policy.seasons_s) * policy.lookback + policy.level_window_s

    def check(self) -> dict[str, int]:
        """Forecast every pool (blocking); a pool whose history cannot be read keeps its
        last published value."""
        published = {}
        for pool, query in self._pools.items():
            try:
                series = self._history(query, self._back_s, self._policy.step_s)
            except (OSError, ValueError, KeyError) as exc:
                log.warning("demand history of pool %s unreadable (keeping the last forecast): %s", pool, exc)
                continue
            expected = forecast(series, self._policy)
            demand = latest(series) if expected is None else expected
            replicas = self._policy.replicas(demand)
            self._metrics.forecast_demand.labels(pool=pool).set(demand)
            self._metrics.forecast_replicas.labels(pool=pool).set(replicas)
            published[pool] = replicas
        return published

    async def run(self, stop: asyncio.Event, every_s: float) -> None:
        while not stop.is_set():
            await asyncio.to_thread(self.check)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=every_s)
