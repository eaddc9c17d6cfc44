"""The Batcher gRPC servicer: Submit streams and QueueStats over BatcherService."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator

from ferryman.errors import CallFailed, abort
from ferryman.v1 import batcher_pb2, batcher_pb2_grpc
from ferryman_server.batcher.generation import GenerationRelay
from ferryman_server.batcher.service import BatcherService
from ferryman_server.kernel.serving import ServicerContext

# Longest a Submit stream's reader runs before letting other tasks in.
READ_YIELD_INTERVAL_S = 0.0005


class BatcherServicer(batcher_pb2_grpc.BatcherServicer):
    def __init__(
        self, service: BatcherService, generation: GenerationRelay, default_timeout_s: float
    ) -> None:
        self._service = service
        self._generation = generation
        self._default_timeout_s = default_timeout_s
        self._stream_ids = itertools.count(1)

    async def Submit(
        self, request_iterator: AsyncIterator[batcher_pb2.SubmitRequest], context: ServicerContext
    ) -> AsyncIterator[batcher_pb2.SubmitResponse]:
        stream = next(self._stream_ids)
        results: asyncio.Queue[batcher_pb2.ItemResult] = asyncio.Queue()

        async def read() -> None:
            last_yield = time.monotonic()
            async for message in request_iterator:
                for item in message.items:
                    if item.cancel:
                        self._service.cancel(stream, item.request_id)
                    else:
                        self._service.submit(item, results.put_nowait, stream)
                # A flooded stream's reads complete without suspending; yield now and then
                # so the scheduler and dispatch tasks are not starved under overload.
                if time.monotonic() - last_yield > READ_YIELD_INTERVAL_S:
                    await asyncio.sleep(0)
                    last_yield = time.monotonic()

        reader = asyncio.create_task(read())
        try:
            while True:
                if reader.done():
                    reader.result()  # re-raise a broken stream
                    if results.empty() and self._service.pending(stream) == 0:
                        return
                    first = await results.get()
                else:
                    getter = asyncio.ensure_future(results.get())
                    done, _ = await asyncio.wait({getter, reader}, return_when=asyncio.FIRST_COMPLETED)
                    if getter not in done:
                        getter.cancel()
                        continue
                    first = getter.result()
                # Everything ready goes out in one message.
                batch = [first]
                while not results.empty():
                    batch.append(results.get_nowait())
                yield batcher_pb2.SubmitResponse(results=batch)
        finally:
            reader.cancel()
            self._service.stream_closed(stream)

    async def QueueStats(
        self, request: batcher_pb2.QueueStatsRequest, context: ServicerContext
    ) -> batcher_pb2.QueueStatsResponse:
        return self._service.queue_stats()

    async def Generate(
        self, request: batcher_pb2.GenerateItem, context: ServicerContext
    ) -> AsyncIterator[batcher_pb2.GenerationEvent]:
        remaining = context.time_remaining()
        budget = self._default_timeout_s if remaining is None else remaining
        events = self._generation.generate(request, time.monotonic() + budget)
        try:
            async for event in events:
                yield event
        except CallFailed as exc:
            await abort(context, exc.status)
        finally:
            await events.aclose()
