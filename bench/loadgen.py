"""Open-loop load on Batcher.Submit: Poisson arrivals, per-request deadlines, latencies.

Shared by the batcher benchmarks; the full load generator (``ferryman bench``) builds on it.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import statistics
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import timedelta

import grpc
import numpy as np

from ferryman.tensors import encode
from ferryman.v1 import batcher_pb2, batcher_pb2_grpc, common_pb2
from ferryman_server.kernel.config import CommonSettings
from ferryman_server.kernel.security import aio_channel

STREAMS = 4
CODE_NAMES = {code.value[0]: code.name for code in grpc.StatusCode}
DRAIN_GRACE_S = 2.0


@dataclass
class RunResult:
    rate: float
    seconds: float
    deadline_s: float
    latencies: list[float] = field(default_factory=list)
    """Seconds to an OK answer."""
    errors: dict[str, int] = field(default_factory=dict)
    sent: int = 0

    @property
    def throughput(self) -> float:
        return len(self.latencies) / self.seconds

    @property
    def goodput(self) -> float:
        return sum(1 for t in self.latencies if t <= self.deadline_s) / self.seconds

    def percentile(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        return statistics.quantiles(self.latencies, n=1000, method="inclusive")[int(q * 10) - 1]


async def open_loop(
    address: str,
    make_inputs: Callable[[int], list[common_pb2.NamedTensor]],
    *,
    model: str,
    version: str,
    rate: float,
    seconds: float,
    deadline_s: float,
    seed: int = 0,
) -> RunResult:
    """Send Poisson arrivals at ``rate``/s for ``seconds`` over a few Submit streams."""
    result = RunResult(rate=rate, seconds=seconds, deadline_s=deadline_s)
    rng = random.Random(seed)
    sent_at: dict[str, float] = {}
    outboxes: list[asyncio.Queue[batcher_pb2.SubmitItem | None]] = [asyncio.Queue() for _ in range(STREAMS)]
    security = CommonSettings().security()  # the batcher is internal: authenticate as a service
    channel = aio_channel(address, security)
    stub = batcher_pb2_grpc.BatcherStub(channel)

    async def requests(
        box: asyncio.Queue[batcher_pb2.SubmitItem | None],
    ) -> AsyncIterator[batcher_pb2.SubmitRequest]:
        while (first := await box.get()) is not None:
            items = [first]
            while not box.empty():
                queued = box.get_nowait()
                if queued is None:
                    yield batcher_pb2.SubmitRequest(items=items)
                    return
                items.append(queued)
            yield batcher_pb2.SubmitRequest(items=items)

    async def read(box: asyncio.Queue[batcher_pb2.SubmitItem | None]) -> None:
        async for response in stub.Submit(requests(box), metadata=security.metadata()):
            for reply in response.results:
                record(reply)

    def record(reply: batcher_pb2.ItemResult) -> None:
        started = sent_at.pop(reply.request_id, None)
        if started is None:
            return
        if reply.status.code == 0:
            result.latencies.append(time.perf_counter() - started)
            return
        name = CODE_NAMES.get(reply.status.code, grpc.StatusCode.UNKNOWN.name)
        result.errors[name] = result.errors.get(name, 0) + 1

    readers = [asyncio.create_task(read(box)) for box in outboxes]
    budget = timedelta(seconds=deadline_s)
    start = time.perf_counter()
    next_at = start
    for n in itertools.count():
        next_at += rng.expovariate(rate)
        if next_at - start > seconds:
            break
        delay = next_at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        submit = batcher_pb2.SubmitItem(
            request_id=str(n), tenant="bench", model=model, version=version, inputs=make_inputs(n)
        )
        submit.time_budget.FromTimedelta(budget)
        submit.deadline.FromNanoseconds(time.time_ns() + int(deadline_s * 1e9))
        sent_at[submit.request_id] = time.perf_counter()
        outboxes[n % STREAMS].put_nowait(submit)
        result.sent += 1
    await asyncio.sleep(deadline_s + DRAIN_GRACE_S)
    for box in outboxes:
        box.put_nowait(None)
    await asyncio.wait(readers, timeout=DRAIN_GRACE_S)
    await channel.close(grace=None)
    lost = len(sent_at)
    if lost:
        result.errors["NO_ANSWER"] = lost
    return result


def make_inputs_factory() -> Callable[[int], list[common_pb2.NamedTensor]]:
    """``mlp`` inputs that differ per request (nothing coalesces or hits a cache)."""
    base = np.random.default_rng(0).standard_normal((1, 512), dtype=np.float32)

    def make(n: int) -> list[common_pb2.NamedTensor]:
        x = base.copy()
        x[0, 0] = n  # unique inputs: nothing coalesces
        return [common_pb2.NamedTensor(name="input", tensor=encode(x))]

    return make
