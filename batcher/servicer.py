"""The Batcher gRPC servicer: Submit streams and QueueStats over BatcherService."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator

from batcher.service import BatcherService
from ferryman.serving import ServicerContext
from ferryman.v1 import batcher_pb2, batcher_pb2_grpc


class BatcherServicer(batcher_pb2_grpc.BatcherServicer):
    def __init__(self, service: BatcherService) -> None:
        self._service = service
        self._stream_ids = itertools.count(1)

    async def Submit(
        self, request_iterator: AsyncIterator[batcher_pb2.SubmitItem], context: ServicerContext
    ) -> AsyncIterator[batcher_pb2.ItemResult]:
        stream = next(self._stream_ids)
        results: asyncio.Queue[batcher_pb2.ItemResult] = asyncio.Queue()

        async def read() -> None:
            async for item in request_iterator:
                if item.cancel:
                    self._service.cancel(stream, item.request_id)
                else:
                    self._service.submit(item, results.put_nowait, stream)

        reader = asyncio.create_task(read())
        try:
            while True:
                if reader.done():
                    reader.result()  # re-raise a broken stream
                    if results.empty() and self._service.pending(stream) == 0:
                        return
                    yield await results.get()
                    continue
                getter = asyncio.ensure_future(results.get())
                done, _ = await asyncio.wait({getter, reader}, return_when=asyncio.FIRST_COMPLETED)
                if getter in done:
                    yield getter.result()
                else:
                    getter.cancel()
        finally:
            reader.cancel()
            self._service.stream_closed(stream)

    async def QueueStats(
        self, request: batcher_pb2.QueueStatsRequest, context: ServicerContext
    ) -> batcher_pb2.QueueStatsResponse:
        return self._service.queue_stats()
