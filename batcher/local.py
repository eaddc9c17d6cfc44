"""The router's batcher port (``ferryman_server.router.batchers.BatcherPort``) served by a batcher in the
same process: items go straight to ``BatcherService.submit``, no stream, no encoding.
The CLI wires it (``ferryman serve router --local-batcher``); services never import
each other."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator

import grpc

from ferryman.errors import Reason, make_status
from ferryman.v1 import batcher_pb2
from ferryman_server.batcher.generation import GenerationRelay
from ferryman_server.batcher.service import BatcherService

LOCAL_STREAM = 0
"""The one caller stream of an in-process batcher (gRPC streams count from 1)."""


class LocalBatcher:
    def __init__(self, service: BatcherService, generation: GenerationRelay) -> None:
        self._service = service
        self._generation = generation

    async def submit(self, item: batcher_pb2.SubmitItem, deadline: float) -> batcher_pb2.ItemResult:
        """The item's result, or DEADLINE_EXCEEDED once ``deadline`` (event-loop time) passes;
        a caller that leaves or runs out of time cancels the item (as a gRPC stream would)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[batcher_pb2.ItemResult] = loop.create_future()

        def sink(result: batcher_pb2.ItemResult) -> None:
            if not future.done():
                future.set_result(result)

        self._service.submit(item, sink, LOCAL_STREAM)
        try:
            # The future is the sink's alone to resolve: a timeout or cancel here only stops
            # waiting (the sink then finds it done and drops the late result).
            async with asyncio.timeout_at(deadline):
                return await future
        except TimeoutError:
            self._service.cancel(LOCAL_STREAM, item.request_id)
            status = make_status(
                grpc.StatusCode.DEADLINE_EXCEEDED, "no answer in time", reason=Reason.DEADLINE
            )
            return batcher_pb2.ItemResult(request_id=item.request_id, status=status)
        except asyncio.CancelledError:
            self._service.cancel(LOCAL_STREAM, item.request_id)
            raise

    async def generate(
        self, request: batcher_pb2.GenerateItem, deadline: float
    ) -> AsyncGenerator[batcher_pb2.GenerationEvent]:
        """The generation's events straight from the relay (refusals raise CallFailed)."""
        remaining = deadline - asyncio.get_running_loop().time()
        events = self._generation.generate(request, time.monotonic() + remaining)
        try:
            async for event in events:
                yield event
        finally:
            await events.aclose()

    async def close(self) -> None:
        """Nothing to release: the batcher's host is stopped by its owner."""
