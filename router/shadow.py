"""Shadow traffic: a share of a model's answered requests is sent again to the route's shadow
version, whose answer goes to nobody and is compared with the live one
(``ferryman_shadow_compared_total``, what rollouts' ``max_diff_rate`` gate reads).

A shadow is never charged (no quota call), never coalesced with or cached for real items,
and runs in the batcher under its own background scope (``ferryman_server.kernel.scopes``): only in
capacity tenants leave, with a short deadline, and at most ``shadow_max_inflight`` at once
per router. Past that bound, or when no capacity came in time, it is skipped (counted), so
mirroring sheds before it could slow real traffic.
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from collections.abc import Callable

import grpc
import numpy as np

from ferryman.errors import NO_CAPACITY
from ferryman.tensors import decode
from ferryman.v1 import batcher_pb2, common_pb2, inference_pb2
from ferryman_server.kernel.canary import SHADOW_SAME
from ferryman_server.kernel.scopes import SHADOW_SCOPE
from ferryman_server.registry.snapshot import RouteRecord, TenantRecord
from ferryman_server.router.batchers import BatcherPort, set_deadline
from ferryman_server.router.metrics import RouterMetrics
from ferryman_server.router.settings import RouterSettings

log = logging.getLogger("ferryman.router.shadow")
DIFFER = "differ"
FAILED = "failed"
PERCENT = 100


def same_outputs(
    live: list[common_pb2.NamedTensor], shadow: list[common_pb2.NamedTensor], rtol: float, atol: float
) -> bool:
    """Whether two answers agree: the same output names and shapes, values within tolerance."""
    if sorted(t.name for t in live) != sorted(t.name for t in shadow):
        return False
    theirs = {t.name: t for t in shadow}
    for ours in live:
        other = theirs[ours.name]
        if ours.WhichOneof("value") != other.WhichOneof("value"):
            return False
        if ours.WhichOneof("value") != "tensor":
            if list(ours.text.values) != list(other.text.values):
                return False
            continue
        a, b = decode(ours.tensor), decode(other.tensor)
        if a.shape != b.shape or not np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True):
            return False
    return True


class Shadower:
    def __init__(
        self,
        settings: RouterSettings,
        batchers: BatcherPort,
        metrics: RouterMetrics,
        is_ready: Callable[[str, str], bool],
        rng: Callable[[], float] = random.random,
    ) -> None:
        self._settings = settings
        self._is_ready = is_ready
        self._batchers = batchers
        self._metrics = metrics
        self._rng = rng
        self._tasks: set[asyncio.Task[None]] = set()

    def answered(
        self,
        tenant: TenantRecord,
        route: RouteRecord | None,
        request: inference_pb2.PredictRequest,
        response: inference_pb2.PredictResponse,
    ) -> None:
        """Mirror this answered request to the route's shadow version, if its share says so
        (whoever the tenant: a shadow runs under its own scope)."""
        if route is None or not route.shadow_percent or response.fallback:
            return
        version = route.shadow_version
        if version == response.version or self._rng() * PERCENT >= route.shadow_percent:
            return
        if len(self._tasks) >= self._settings.shadow_max_inflight or not self._is_ready(route.model, version):
            self._metrics.child(self._metrics.shadow_skipped, route.model, version).inc()
            return
        task = asyncio.create_task(self._mirror(request, response, route.model, version))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _mirror(
        self,
        request: inference_pb2.PredictRequest,
        response: inference_pb2.PredictResponse,
        model: str,
        version: str,
    ) -> None:
        item = batcher_pb2.SubmitItem(
            request_id=f"{SHADOW_SCOPE}/{uuid.uuid4().hex}",
            tenant=SHADOW_SCOPE,
            model=model,
            version=version,
            parameters=request.parameters,
            priority=common_pb2.PRIORITY_LOW,
            inputs=request.inputs,
            shadow=True,
        )
        timeout_s = self._settings.shadow_timeout_s
        try:
            deadline = asyncio.get_running_loop().time() + timeout_s
            result = await self._batchers.submit(set_deadline(item, timeout_s), deadline)
        except TimeoutError:
            result = batcher_pb2.ItemResult(status={"code": grpc.StatusCode.DEADLINE_EXCEEDED.value[0]})
        except Exception:  # a shadow must never hurt the router: count it and go on
            log.debug("shadow of %s:%s failed", model, version, exc_info=True)
            result = batcher_pb2.ItemResult(status={"code": grpc.StatusCode.INTERNAL.value[0]})
        if result.status.code in NO_CAPACITY:
            # Shadows run only in capacity tenants leave: none came in time. Unmeasured, not a
            # difference.
            self._metrics.child(self._metrics.shadow_skipped, model, version).inc()
            return
        outcome = FAILED
        if result.status.code == 0:
            live, shadow = list(response.outputs), list(result.outputs)
            same = same_outputs(live, shadow, self._settings.shadow_rtol, self._settings.shadow_atol)
            outcome = SHADOW_SAME if same else DIFFER
        self._metrics.child(self._metrics.shadow_compared, model, version, outcome).inc()

    async def close(self) -> None:
        """Stop mirroring: what is still running is cancelled (it answers nobody)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
