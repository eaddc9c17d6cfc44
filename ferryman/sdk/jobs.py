"""A client's durable jobs (``Client.jobs``): many requests to one model, queued and run in
the capacity real-time traffic leaves, at the job price."""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Any

import grpc

from ferryman.durations import set_seconds
from ferryman.sdk.calls import DEFAULT_RETRIES, out_of_time, retry_or_raise
from ferryman.sdk.convert import to_inputs
from ferryman.sdk.errors import from_rpc_error
from ferryman.v1 import inference_pb2, jobs_pb2, jobs_pb2_grpc

PAGE = 1000


def submit_request(
    model: str,
    items: Iterable[Any],
    info: inference_pb2.ModelInfo,
    job_id: str | None,
    version: str | None,
    parameters: Mapping[str, str] | None,
    completion_window_s: float | None,
) -> jobs_pb2.SubmitJobRequest:
    """A SubmitJob of ``items`` (inputs, or ``(custom_id, inputs)`` pairs), under ``job_id``
    or a new one."""
    request = jobs_pb2.SubmitJobRequest(
        job_id=job_id or uuid.uuid4().hex, model=model, version=version or "", parameters=parameters or {}
    )
    for i, item in enumerate(items):
        custom_id, inputs = item if isinstance(item, tuple) else (str(i), item)
        request.items.append(
            jobs_pb2.JobItem(custom_id=custom_id, inputs=to_inputs(inputs, info, version or ""))
        )
    if completion_window_s:
        set_seconds(request.completion_window, completion_window_s)
    return request


def fresh_results(event: jobs_pb2.JobEvent, seen: set[int]) -> jobs_pb2.JobEvent:
    """``event`` without the results already in ``seen`` (a watch watched again resends
    them); ``seen`` takes the new ones."""
    fresh = [r for r in event.results if r.index not in seen]
    seen.update(r.index for r in fresh)
    del event.results[:]
    event.results.extend(fresh)
    return event


class Jobs:
    """Every call is safe to repeat (a job is named by its id; the rest read or cancel), so
    each is retried like ``predict``, within the client's timeout."""

    def __init__(
        self,
        channel: grpc.Channel,
        metadata: tuple[tuple[str, str], ...],
        timeout: float,
        model_info: Callable[[str], inference_pb2.ModelInfo],
        retries: int = DEFAULT_RETRIES,
    ) -> None:
        self._stub = jobs_pb2_grpc.JobsStub(channel)
        self._metadata = metadata
        self._timeout = timeout
        self._model_info = model_info
        self._retries = retries

    def _call(self, method: Callable[..., Any], request: Any) -> Any:
        deadline = time.monotonic() + self._timeout
        for attempt in range(self._retries + 1):
            try:
                return method(request, metadata=self._metadata, timeout=max(0.0, deadline - time.monotonic()))
            except grpc.RpcError as exc:
                error = from_rpc_error(exc)
            time.sleep(retry_or_raise(error, attempt, self._retries, time.monotonic(), deadline))
        raise AssertionError("unreachable")

    def submit(
        self,
        model: str,
        items: Iterable[Any],
        *,
        job_id: str | None = None,
        version: str | None = None,
        parameters: Mapping[str, str] | None = None,
        completion_window_s: float | None = None,
    ) -> jobs_pb2.Job:
        """Queue a job. ``items``: inputs as ``predict`` takes them, or ``(custom_id, inputs)``
        pairs. Submitting again with the same ``job_id`` returns the same job."""
        request = submit_request(
            model, items, self._model_info(model), job_id, version, parameters, completion_window_s
        )
        job: jobs_pb2.Job = self._call(self._stub.SubmitJob, request)
        return job

    def get(self, job_id: str) -> jobs_pb2.Job:
        job: jobs_pb2.Job = self._call(self._stub.GetJob, jobs_pb2.GetJobRequest(job_id=job_id))
        return job

    def list(self, page_size: int = 50) -> list[jobs_pb2.Job]:
        """The newest jobs first (one page)."""
        page: jobs_pb2.ListJobsResponse = self._call(
            self._stub.ListJobs, jobs_pb2.ListJobsRequest(page_size=page_size)
        )
        return list(page.jobs)

    def cancel(self, job_id: str) -> jobs_pb2.Job:
        job: jobs_pb2.Job = self._call(self._stub.CancelJob, jobs_pb2.CancelJobRequest(job_id=job_id))
        return job

    def results(self, job_id: str) -> Iterator[jobs_pb2.JobItemResult]:
        """Every recorded result, by item index."""
        total = self.get(job_id).total
        for offset in range(0, total, PAGE):
            request = jobs_pb2.GetJobResultsRequest(job_id=job_id, offset=offset, limit=PAGE)
            page: jobs_pb2.GetJobResultsResponse = self._call(self._stub.GetJobResults, request)
            yield from page.results

    def watch(self, job_id: str, *, timeout: float | None = None) -> Iterator[jobs_pb2.JobEvent]:
        """Progress and results as they land, until the job ends, or for ``timeout`` seconds
        (None: as long as the job runs; past it, DeadlineExceeded). A watch whose connection
        dies (found by the channel's keepalive) or whose router stops is watched again, and
        results already yielded are left out of later events."""
        deadline = None if timeout is None else time.monotonic() + timeout
        seen: set[int] = set()
        attempt = 0
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise out_of_time()
            request = jobs_pb2.WatchJobRequest(job_id=job_id)
            try:
                for event in self._stub.WatchJob(request, metadata=self._metadata, timeout=left):
                    attempt = 0  # the retries count failures in a row
                    yield fresh_results(event, seen)
                return
            except grpc.RpcError as exc:
                error = from_rpc_error(exc)
            now = time.monotonic()
            time.sleep(
                retry_or_raise(error, attempt, self._retries, now, math.inf if deadline is None else deadline)
            )
            attempt += 1


class AsyncJobs:
    """``Jobs`` on asyncio (``AsyncClient.jobs``): the same calls, awaited."""

    def __init__(
        self,
        channel: grpc.aio.Channel,
        metadata: tuple[tuple[str, str], ...],
        timeout: float,
        model_info: Callable[[str], Awaitable[inference_pb2.ModelInfo]],
        retries: int = DEFAULT_RETRIES,
    ) -> None:
        self._stub = jobs_pb2_grpc.JobsStub(channel)
        self._metadata = metadata
        self._timeout = timeout
        self._model_info = model_info
        self._retries = retries

    async def _call(self, method: Callable[..., Any], request: Any) -> Any:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        for attempt in range(self._retries + 1):
            try:
                return await method(
                    request, metadata=self._metadata, timeout=max(0.0, deadline - loop.time())
                )
            except grpc.RpcError as exc:
                error = from_rpc_error(exc)
            await asyncio.sleep(retry_or_raise(error, attempt, self._retries, loop.time(), deadline))
        raise AssertionError("unreachable")

    async def submit(
        self,
        model: str,
        items: Iterable[Any],
        *,
        job_id: str | None = None,
        version: str | None = None,
        parameters: Mapping[str, str] | None = None,
        completion_window_s: float | None = None,
    ) -> jobs_pb2.Job:
        """As ``Jobs.submit``."""
        info = await self._model_info(model)
        request = submit_request(model, items, info, job_id, version, parameters, completion_window_s)
        job: jobs_pb2.Job = await self._call(self._stub.SubmitJob, request)
        return job

    async def get(self, job_id: str) -> jobs_pb2.Job:
        job: jobs_pb2.Job = await self._call(self._stub.GetJob, jobs_pb2.GetJobRequest(job_id=job_id))
        return job

    async def list(self, page_size: int = 50) -> list[jobs_pb2.Job]:
        """The newest jobs first (one page)."""
        page: jobs_pb2.ListJobsResponse = await self._call(
            self._stub.ListJobs, jobs_pb2.ListJobsRequest(page_size=page_size)
        )
        return list(page.jobs)

    async def cancel(self, job_id: str) -> jobs_pb2.Job:
        job: jobs_pb2.Job = await self._call(self._stub.CancelJob, jobs_pb2.CancelJobRequest(job_id=job_id))
        return job

    async def results(self, job_id: str) -> AsyncIterator[jobs_pb2.JobItemResult]:
        """Every recorded result, by item index."""
        total = (await self.get(job_id)).total
        for offset in range(0, total, PAGE):
            request = jobs_pb2.GetJobResultsRequest(job_id=job_id, offset=offset, limit=PAGE)
            page: jobs_pb2.GetJobResultsResponse = await self._call(self._stub.GetJobResults, request)
            for result in page.results:
                yield result

    async def watch(
        self,
        job_id: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 (as Jobs.watch; a generator cannot be wrapped)
    ) -> AsyncIterator[jobs_pb2.JobEvent]:
        """As ``Jobs.watch``."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        seen: set[int] = set()
        attempt = 0
        while True:
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                raise out_of_time()
            request = jobs_pb2.WatchJobRequest(job_id=job_id)
            try:
                async for event in self._stub.WatchJob(request, metadata=self._metadata, timeout=left):
                    attempt = 0
                    yield fresh_results(event, seen)
                return
            except grpc.RpcError as exc:
                error = from_rpc_error(exc)
            now = loop.time()
            limit = math.inf if deadline is None else deadline
            await asyncio.sleep(retry_or_raise(error, attempt, self._retries, now, limit))
            attempt += 1
