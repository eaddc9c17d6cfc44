"""Load on the Inference API: closed loop (N in flight) or open loop (Poisson arrivals),
unary Predict or one PredictStream per worker, measured in windows after a warm-up."""

from __future__ import annotations

import asyncio
import itertools
import random
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import timedelta

import grpc

from ferryman.v1 import common_pb2, inference_pb2, inference_pb2_grpc
from ferryman_server.cli.bench.stats import Window, stable

CODE_NAMES = {code.value[0]: code.name for code in grpc.StatusCode}
InputsFactory = Callable[[int], list[common_pb2.NamedTensor]]


@dataclass(frozen=True)
class LoadSpec:
    target: str
    api_key: str
    model: str
    concurrency: int = 1
    """Closed loop: requests in flight. Open loop with ``stream``: streams to spread them over."""
    rate: float = 0.0
    """Open loop: Poisson arrivals per second (0 = closed loop)."""
    stream: bool = False
    """PredictStream instead of unary Predict (each request carries its own timeout)."""
    deadline_s: float = 1.0
    warmup_s: float = 2.0
    window_s: float = 5.0
    max_windows: int = 10


class Recorder:
    """Collects answers into the current window."""

    def __init__(self, deadline_s: float) -> None:
        self.deadline_s = deadline_s
        self.window = Window(seconds=0.0)

    def ok(self, seconds: float) -> None:
        self.window.latencies.append(seconds)
        if seconds <= self.deadline_s:
            self.window.within_deadline += 1

    def error(self, code: str, seconds: float) -> None:
        self.window.errors[code] = self.window.errors.get(code, 0) + 1
        self.window.error_latencies.setdefault(code, []).append(seconds)

    def roll(self, seconds: float) -> Window:
        done, self.window = self.window, Window(seconds=0.0)
        done.seconds = seconds
        return done


async def run(
    spec: LoadSpec,
    make_inputs: InputsFactory,
    on_window: Callable[[Window], None] | None = None,
    on_start: Callable[[], None] | None = None,
) -> list[Window]:
    """Warm up, then measure windows until three in a row agree within 10% (or max_windows).

    ``on_start`` runs when the warm-up ends, ``on_window`` after each measured window."""
    channel = grpc.aio.insecure_channel(spec.target)
    stub = inference_pb2_grpc.InferenceStub(channel)
    metadata = (("authorization", f"Bearer {spec.api_key}"),)
    recorder = Recorder(spec.deadline_s)
    counter = itertools.count()
    stop = asyncio.Event()
    timeout = timedelta(seconds=spec.deadline_s)

    def request() -> inference_pb2.PredictRequest:
        n = next(counter)
        message = inference_pb2.PredictRequest(
            request_id=uuid.uuid4().hex, model=spec.model, inputs=make_inputs(n)
        )
        message.timeout.FromTimedelta(timeout)  # per request: what a stream's deadline cannot say
        return message

    async def unary_once() -> None:
        started = time.perf_counter()
        try:
            await stub.Predict(request(), metadata=metadata, timeout=spec.deadline_s)
            recorder.ok(time.perf_counter() - started)
        except grpc.aio.AioRpcError as exc:
            recorder.error(exc.code().name, time.perf_counter() - started)

    async def closed_unary() -> None:
        while not stop.is_set():
            await unary_once()

    async def answered(
        call: AsyncIterator[inference_pb2.PredictStreamResponse], sent: dict[str, float]
    ) -> AsyncIterator[None]:
        """Record each answer of a stream against its send time; yield after each one."""
        async for answer in call:
            started = sent.pop(answer.request_id, None)
            if started is None:
                continue
            seconds = time.perf_counter() - started
            if answer.WhichOneof("result") == "response":
                recorder.ok(seconds)
            else:
                recorder.error(CODE_NAMES.get(answer.error.code, "UNKNOWN"), seconds)
            yield None

    async def outbox(
        queue: asyncio.Queue[inference_pb2.PredictRequest | None], sent: dict[str, float]
    ) -> AsyncIterator[inference_pb2.PredictRequest]:
        while (item := await queue.get()) is not None:
            sent[item.request_id] = time.perf_counter()
            yield item

    async def closed_stream() -> None:
        # One request in flight per stream: send the next when the answer comes.
        queue: asyncio.Queue[inference_pb2.PredictRequest | None] = asyncio.Queue()
        sent: dict[str, float] = {}
        queue.put_nowait(request())
        call = stub.PredictStream(outbox(queue, sent), metadata=metadata)
        async for _ in answered(call, sent):
            queue.put_nowait(None if stop.is_set() else request())

    async def open_stream() -> None:
        # Poisson arrivals spread over a few long-lived streams; answers come when they come.
        queues: list[asyncio.Queue[inference_pb2.PredictRequest | None]] = [
            asyncio.Queue() for _ in range(max(1, spec.concurrency))
        ]
        sent: dict[str, float] = {}

        async def drain(queue: asyncio.Queue[inference_pb2.PredictRequest | None]) -> None:
            async for _ in answered(stub.PredictStream(outbox(queue, sent), metadata=metadata), sent):
                pass

        readers = [asyncio.create_task(drain(q)) for q in queues]
        rng = random.Random(0)
        next_at = time.perf_counter()
        for n in itertools.count():
            if stop.is_set():
                break
            next_at += rng.expovariate(spec.rate)
            await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
            queues[n % len(queues)].put_nowait(request())
        for queue in queues:
            queue.put_nowait(None)
        await asyncio.wait(readers, timeout=spec.deadline_s + 1)

    async def open_loop() -> None:
        rng = random.Random(0)
        running: set[asyncio.Task[None]] = set()
        next_at = time.perf_counter()
        while not stop.is_set():
            next_at += rng.expovariate(spec.rate)
            await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
            task = asyncio.create_task(unary_once())
            running.add(task)
            task.add_done_callback(running.discard)
        await asyncio.gather(*running, return_exceptions=True)

    if spec.rate > 0:
        workers = [asyncio.create_task(open_stream() if spec.stream else open_loop())]
    else:
        worker = closed_stream if spec.stream else closed_unary
        workers = [asyncio.create_task(worker()) for _ in range(spec.concurrency)]
    await asyncio.sleep(spec.warmup_s)
    recorder.roll(spec.warmup_s)
    if on_start is not None:
        on_start()
    windows: list[Window] = []
    while len(windows) < spec.max_windows and not stable(windows):
        started = time.perf_counter()
        await asyncio.sleep(spec.window_s)
        window = recorder.roll(time.perf_counter() - started)
        windows.append(window)
        if on_window is not None:
            on_window(window)
    stop.set()
    await asyncio.wait(workers, timeout=spec.deadline_s + 1)
    for task in workers:
        task.cancel()
    await channel.close(grace=None)
    return windows
