"""The router's side of Batcher.Submit: a few long-lived streams per batcher, results
matched to callers by request id, each model sent to one batcher by rendezvous
hashing (so its batches fill) and to the next one when that batcher is down."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, Protocol

import grpc

from ferryman.durations import set_seconds
from ferryman.errors import CallFailed, Reason, make_status, status_of
from ferryman.v1 import batcher_pb2, batcher_pb2_grpc
from ferryman_server.kernel.security import Security, aio_channel
from ferryman_server.kernel.serving import channel_options
from ferryman_server.router.discovery import Member, Resolver, flatten, resolve, split, system_resolver

log = logging.getLogger("ferryman.router.batchers")


def set_deadline(item: batcher_pb2.SubmitItem, remaining_s: float) -> batcher_pb2.SubmitItem:
    """Give an item its time budget and the same deadline as wall-clock time (the batcher
    uses the earlier, so time in transport queues counts)."""
    remaining_s = max(0.0, remaining_s)
    set_seconds(item.time_budget, remaining_s)
    item.deadline.FromNanoseconds(time.time_ns() + int(remaining_s * 1e9))
    return item


class BatcherPort(Protocol):
    """How the router hands an item to "a batcher": over gRPC streams (``BatcherPool``) or
    in-process (``ferryman_server.batcher.local.LocalBatcher``, wired by the CLI)."""

    async def submit(self, item: batcher_pb2.SubmitItem, deadline: float) -> batcher_pb2.ItemResult:
        """The item's result (errors come back as results), by ``deadline`` (event-loop time)."""
        ...

    def generate(
        self, request: batcher_pb2.GenerateItem, deadline: float
    ) -> AsyncGenerator[batcher_pb2.GenerationEvent]:
        """One generation's events, by ``deadline`` (event-loop time); refusals and failures
        raise CallFailed. Closing it early ends the generation."""
        ...

    async def close(self) -> None: ...


class StreamBroken(Exception):
    """The stream ended before the item's result came back; another batcher may take it."""


class BatcherStream:
    """One Submit stream: items out packed per message, results in by request id."""

    def __init__(self, stub: batcher_pb2_grpc.BatcherStub, metadata: tuple[tuple[str, str], ...]) -> None:
        self._stub = stub
        self._metadata = metadata
        self._outbox: asyncio.Queue[batcher_pb2.SubmitItem | None] = asyncio.Queue()
        self._pending: dict[str, asyncio.Future[batcher_pb2.ItemResult]] = {}
        self._task = asyncio.create_task(self._run())

    @property
    def alive(self) -> bool:
        return not self._task.done()

    async def _messages(self) -> AsyncIterator[batcher_pb2.SubmitRequest]:
        while (first := await self._outbox.get()) is not None:
            items = [first]
            while not self._outbox.empty():
                queued = self._outbox.get_nowait()
                if queued is None:
                    yield batcher_pb2.SubmitRequest(items=items)
                    return
                items.append(queued)
            yield batcher_pb2.SubmitRequest(items=items)

    async def _run(self) -> None:
        try:
            async for response in self._stub.Submit(self._messages(), metadata=self._metadata):
                for result in response.results:
                    future = self._pending.pop(result.request_id, None)
                    if future is not None and not future.done():
                        future.set_result(result)
        except grpc.aio.AioRpcError as exc:
            log.warning("batcher stream ended: %s %s", exc.code().name, exc.details())
        finally:
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(StreamBroken("batcher stream ended"))
            self._pending.clear()

    async def submit(self, item: batcher_pb2.SubmitItem, budget_s: float) -> batcher_pb2.ItemResult:
        if not self.alive:
            raise StreamBroken("batcher stream is closed")
        future: asyncio.Future[batcher_pb2.ItemResult] = asyncio.get_running_loop().create_future()
        self._pending[item.request_id] = future
        self._outbox.put_nowait(item)
        try:
            return await asyncio.wait_for(asyncio.shield(future), budget_s)
        except (TimeoutError, asyncio.CancelledError):
            # The caller left: tell the batcher, so work nobody else waits for is dropped.
            if self._pending.pop(item.request_id, None) is not None and self.alive:
                self._outbox.put_nowait(batcher_pb2.SubmitItem(request_id=item.request_id, cancel=True))
            raise

    async def close(self) -> None:
        self._outbox.put_nowait(None)
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            await asyncio.wait_for(self._task, timeout=1.0)
        self._task.cancel()


def rendezvous(addresses: list[str], model: str) -> list[str]:
    """``addresses`` by rendezvous score for ``model``; every router given the same list
    agrees on each model's batcher without talking to the others."""
    return sorted(addresses, key=lambda a: hashlib.sha256(f"{a}\0{model}".encode()).digest(), reverse=True)


class BatcherPool:
    """Streams to every batcher; picks one per model by rendezvous hashing. The batchers
    are the configured addresses, names expanded to what they resolve to (``refresh``)."""

    def __init__(
        self,
        addresses: list[str],
        streams_per_batcher: int,
        max_message_bytes: int,
        security: Security,
        resolver: Resolver = system_resolver,
    ) -> None:
        if not addresses:
            raise ValueError("the router needs at least one batcher address")
        for address in addresses:
            split(address)  # a misconfigured address stops the router at start, not at first use
        self._configured = addresses
        self._resolver = resolver
        self._members = {a: [Member(a)] for a in addresses}
        self._addresses = [m.address for m in flatten(self._members)]
        self._names = {m.address: m.name for m in flatten(self._members)}
        self._per_batcher = streams_per_batcher
        self._security = security
        self._options = channel_options(max_message_bytes)
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._metadata = security.metadata()
        self._streams: dict[str, list[BatcherStream]] = {}
        self._turn = itertools.count()

    @property
    def members(self) -> list[str]:
        """The batcher addresses models are spread over now."""
        return list(self._addresses)

    def _channel(self, address: str) -> grpc.aio.Channel:
        channel = self._channels.get(address)
        if channel is None:
            options: list[tuple[str, Any]] = list(self._options)
            name = self._names.get(address, "")
            if name and self._security.dials_tls() and not self._security.server_name:
                # Dialled by IP, the batcher's certificate names the Service.
                options.append(("grpc.ssl_target_name_override", name))
            channel = self._channels[address] = aio_channel(address, self._security, options)
        return channel

    def _stream(self, address: str) -> BatcherStream:
        streams = [s for s in self._streams.get(address, []) if s.alive]
        if len(streams) < self._per_batcher:
            stub = batcher_pb2_grpc.BatcherStub(self._channel(address))
            streams.append(BatcherStream(stub, self._metadata))
        self._streams[address] = streams
        return streams[next(self._turn) % len(streams)]

    async def refresh(self, timeout_s: float) -> None:
        """Resolve the configured names again; streams to batchers that are gone are closed
        (their pending items fail over to each model's next batcher)."""
        self._members = await resolve(self._configured, self._resolver, self._members, timeout_s)
        members = flatten(self._members)
        addresses = [m.address for m in members]
        if addresses == self._addresses:
            return
        log.info("batchers now %s", ", ".join(addresses))
        gone = set(self._addresses) - set(addresses)
        self._addresses, self._names = addresses, {m.address: m.name for m in members}
        for address in gone:
            for stream in self._streams.pop(address, []):
                await stream.close()
            channel = self._channels.pop(address, None)
            if channel is not None:
                await channel.close(grace=None)

    async def discover(self, period_s: float, stop: asyncio.Event) -> None:
        """``refresh`` every ``period_s`` until ``stop``."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), period_s)
            if not stop.is_set():
                try:
                    await self.refresh(period_s)
                except Exception:  # serve on with the members it has
                    log.exception("refreshing the batcher list failed")

    async def submit(self, item: batcher_pb2.SubmitItem, deadline: float) -> batcher_pb2.ItemResult:
        """Send to the model's batcher, failing over while time remains; errors come back as results."""
        loop = asyncio.get_running_loop()
        timed_out = False
        for address in rendezvous(self._addresses, item.model):
            remaining = deadline - loop.time()
            if remaining <= 0:
                timed_out = True
                break
            try:
                return await self._stream(address).submit(item, remaining)
            except StreamBroken:
                continue
            except TimeoutError:
                # Decided here, not by re-reading the clock: the timer may fire a hair early.
                timed_out = True
                break
        if timed_out:
            status = make_status(
                grpc.StatusCode.DEADLINE_EXCEEDED, "no batcher answered in time", reason=Reason.DEADLINE
            )
        else:
            status = make_status(
                grpc.StatusCode.UNAVAILABLE, "no batcher reachable", reason=Reason.NO_BATCHER
            )
        return batcher_pb2.ItemResult(request_id=item.request_id, status=status)

    async def generate(
        self, request: batcher_pb2.GenerateItem, deadline: float
    ) -> AsyncGenerator[batcher_pb2.GenerationEvent]:
        """From the model's batcher; another one only while no event has come (a batcher
        that is down, or draining)."""
        loop = asyncio.get_running_loop()
        for address in rendezvous(self._addresses, request.model):
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            stub = batcher_pb2_grpc.BatcherStub(self._channel(address))
            call = stub.Generate(request, timeout=remaining, metadata=self._metadata)
            started = False
            try:
                async for event in call:
                    started = True
                    yield event
                return
            except grpc.aio.AioRpcError as exc:
                if started or exc.code() != grpc.StatusCode.UNAVAILABLE:
                    raise CallFailed(status_of(exc)) from None
                log.warning("batcher %s refused a generation: %s", address, exc.details())
            finally:
                call.cancel()
        if deadline - loop.time() <= 0:
            raise CallFailed(
                make_status(
                    grpc.StatusCode.DEADLINE_EXCEEDED, "no batcher answered in time", reason=Reason.DEADLINE
                )
            )
        raise CallFailed(
            make_status(grpc.StatusCode.UNAVAILABLE, "no batcher reachable", reason=Reason.NO_BATCHER)
        )

    async def close(self) -> None:
        for streams in self._streams.values():
            for stream in streams:
                await stream.close()
        for channel in self._channels.values():
            await channel.close(grace=None)
