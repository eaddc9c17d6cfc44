"""The SDK on connections that die without a word (no FIN, no RST: a vanished machine, a
NAT that forgot the connection): its keepalive finds them, and a job's watch goes on over
a new connection without repeating a result."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from figures import report
from freezer import Freezer
from job_helpers import Jobs, worker

from ferryman.sdk import AsyncClient, Client
from ferryman.v1 import jobs_pb2

pytestmark = [pytest.mark.slow, pytest.mark.abuse]

ITEMS = 200
KEEPALIVE_S = 5.0
"""The fastest the router accepts: a dead connection is found within 5 + 5 s."""
WATCH_S = 120.0


def test_a_watch_on_a_connection_that_died_silently_goes_on_over_a_new_one(jobs: Jobs) -> None:
    events: list[jobs_pb2.JobEvent] = []
    first = threading.Event()
    with (
        Freezer(jobs.router) as freezer,
        Client(freezer.address, api_key=jobs.e2e.keys["acme"], keepalive_s=KEEPALIVE_S) as client,
    ):
        job = client.jobs.submit("echo", [{"input": [[float(i)] * 4]} for i in range(ITEMS)])

        def watch() -> None:
            for event in client.jobs.watch(job.job_id, timeout=WATCH_S):
                events.append(event)
                first.set()

        watcher = threading.Thread(target=watch)
        watcher.start()
        assert first.wait(30)
        freezer.freeze()  # the watch's connection now carries nothing, and stays open
        frozen_at = time.monotonic()
        proc = worker(jobs)
        try:
            while freezer.connections < 2 and watcher.is_alive():
                time.sleep(0.1)
            report("sdk watch, dead connection", found_after_s=round(time.monotonic() - frozen_at, 1))
            watcher.join(WATCH_S)
            assert not watcher.is_alive(), "the watch hangs on a dead connection"
        finally:
            proc.terminate()
            proc.wait(30)
        assert freezer.connections >= 2, "watched again over a new connection"
    assert events[-1].job.state == jobs_pb2.JOB_STATE_COMPLETED
    indices = [r.index for e in events for r in e.results]
    assert sorted(indices) == list(range(ITEMS)), "every result once"


async def test_the_async_client_runs_a_job_as_the_blocking_one_does(jobs: Jobs) -> None:
    """AsyncClient.jobs: submit (again: the same job), watch to the end, results, get."""
    async with AsyncClient(jobs.router, api_key=jobs.e2e.keys["acme"]) as client:
        rows = [{"input": [[float(i)] * 4]} for i in range(20)]
        job = await client.jobs.submit("echo", rows, job_id=f"async-{uuid.uuid4().hex[:8]}")
        again = await client.jobs.submit("echo", rows, job_id=job.job_id)
        assert again.created_at == job.created_at
        proc = worker(jobs)
        try:
            events = [e async for e in client.jobs.watch(job.job_id, timeout=WATCH_S)]
        finally:
            proc.terminate()
            proc.wait(30)
        assert sorted(r.index for e in events for r in e.results) == list(range(20))
        results = [r async for r in client.jobs.results(job.job_id)]
        assert sorted(r.index for r in results) == list(range(20))
        assert (await client.jobs.get(job.job_id)).state == jobs_pb2.JOB_STATE_COMPLETED
        assert job.job_id in [j.job_id for j in await client.jobs.list()]
