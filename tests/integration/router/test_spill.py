"""Spill instead of shed, over the real platform and a real Redis: at three times what a
slow version can answer in time, every request of a tenant that opted in (per request, or
by its tenant policy) is answered in time or accepted as a job whose result is its answer
later; nothing is lost. A tenant that did not opt in is refused as before. A retry of a
spilled request finds its job, and runs nothing twice."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field

import grpc
import numpy as np
import pytest
from job_helpers import Jobs, all_results, wait_job, worker
from router_platform import SLOW_MS

from ferryman.errors import Reason
from ferryman.sdk import AcceptedAsJob, AsyncClient, FerrymanError
from ferryman.tensors import decode
from ferryman.v1 import jobs_pb2
from ferryman_server.gpu_node.demo import echo

# Left out of make test-fast: three times a version's capacity for seconds.
pytestmark = pytest.mark.slow

CAPACITY_PER_S = 2 * 2 * 4 / (SLOW_MS / 1000)
"""echo:slow: two nodes with two batch slots each, four rows a batch, one batch per SLOW_MS."""
OVERLOAD = 3.0
SECONDS = 2.0
TIMEOUT_S = 2.0
RETRY_TIMEOUT_S = 10.0
SNAPSHOT_S = 1.5
"""Long enough for the jobs router to read a registry change (tenants, policies)."""


@dataclass
class Outcome:
    answered: int = 0
    late: int = 0
    jobs: dict[str, tuple[str, np.ndarray]] = field(default_factory=dict)
    """job id -> (request id, the request's input)."""
    refused: list[str] = field(default_factory=list)
    timed_out: dict[str, np.ndarray] = field(default_factory=dict)
    """request id -> input, for calls whose own deadline passed with neither an answer nor a
    job found (the router had not read them in time): the client is told, nothing was
    accepted, and a retry under the same id must be answered or become a job."""


async def send(client: AsyncClient, tenant: str, rate: float, spill: bool, seed: int) -> Outcome:
    """Open-loop requests to echo:slow at ``rate`` for SECONDS; each one's outcome."""
    rng = np.random.default_rng(seed)
    outcome = Outcome()

    async def one(i: int) -> None:
        row = rng.standard_normal((1, echo.WIDTH)).astype(np.float32)
        request_id = f"{tenant}-{i}"
        started = time.monotonic()
        try:
            answer = await client.predict(
                "echo", row, version="slow", timeout=TIMEOUT_S, request_id=request_id, spill_to_job=spill
            )
        except AcceptedAsJob as accepted:
            # refused_for is empty when the answer came after the call's deadline and the
            # SDK found the job by looking it up.
            assert accepted.reason == Reason.ACCEPTED_AS_JOB, accepted
            outcome.jobs[accepted.job_id] = (request_id, row)
        except FerrymanError as refused:
            if refused.code == grpc.StatusCode.DEADLINE_EXCEEDED and not refused.reason:
                outcome.timed_out[request_id] = row
            else:
                outcome.refused.append(refused.reason)
        else:
            np.testing.assert_allclose(np.asarray(answer.outputs["output"], np.float32), row * 2)
            late = time.monotonic() - started > TIMEOUT_S
            outcome.late += late
            outcome.answered += not late

    tasks = []
    start = time.monotonic()
    for i in range(int(rate * SECONDS)):
        await asyncio.sleep(max(0.0, start + i / rate - time.monotonic()))
        tasks.append(asyncio.create_task(one(i)))
    await asyncio.gather(*tasks)
    return outcome


async def overload(router: str, keys: dict[str, str]) -> dict[str, Outcome]:
    """The tenants at once, OVERLOAD times the version's capacity between them."""
    rate = OVERLOAD * CAPACITY_PER_S / len(keys)
    clients = {name: AsyncClient(router, key, retries=0) for name, key in keys.items()}
    try:
        runs = [
            send(client, name, rate, spill=name == "per-request", seed=i)
            for i, (name, client) in enumerate(clients.items())
        ]
        return dict(zip(clients, await asyncio.gather(*runs), strict=True))
    finally:
        for client in clients.values():
            await client.close()


async def retry_timed_out(jobs: Jobs, keys: dict[str, str], outcomes: dict[str, Outcome]) -> None:
    for name in ("per-request", "by-policy"):
        async with AsyncClient(jobs.router, keys[name], retries=0) as client:
            for request_id, row in outcomes[name].timed_out.items():
                try:
                    answer = await client.predict(
                        "echo",
                        row,
                        version="slow",
                        timeout=RETRY_TIMEOUT_S,
                        request_id=request_id,
                        spill_to_job=True,
                    )
                except AcceptedAsJob as accepted:
                    done = await asyncio.to_thread(
                        wait_job, jobs, accepted.job_id, {jobs_pb2.JOB_STATE_COMPLETED}, key=keys[name]
                    )
                    assert done.succeeded == 1, done
                else:
                    np.testing.assert_allclose(np.asarray(answer.outputs["output"], np.float32), row * 2)


@pytest.mark.timeout(300)
def test_spilled_requests_are_all_answered_and_the_others_refused(jobs: Jobs) -> None:
    e2e = jobs.e2e
    names = {kind: f"{kind}-{uuid.uuid4().hex[:6]}" for kind in ("per-request", "by-policy", "refused")}
    keys = {kind: e2e.writer.create_tenant(name).plaintext for kind, name in names.items()}
    e2e.writer.update_tenant(names["by-policy"], spill_to_job=True)
    time.sleep(SNAPSHOT_S)
    outcomes = asyncio.run(overload(jobs.router, keys))
    sent = int(OVERLOAD * CAPACITY_PER_S / len(keys) * SECONDS)
    for name in ("per-request", "by-policy"):
        outcome = outcomes[name]
        # Nothing lost: every request answered in time, or a job.
        assert outcome.refused == [] and outcome.late == 0, (name, outcome.refused, outcome.late)
        # A loaded machine can stall the router past some calls' deadlines before it reads them
        # (5 of 106 once in a full local run, beside two other platforms): how many is the
        # machine's load, not a property. Nothing of them is lost: each is retried under its
        # id below and must be answered or become a completed job. A router that spilled
        # nothing would time out most of them, which this still refuses.
        assert len(outcome.timed_out) <= sent // 4, (name, len(outcome.timed_out), sent)
        assert outcome.answered + len(outcome.jobs) + len(outcome.timed_out) == sent, name
        assert outcome.jobs, f"{name}: at {OVERLOAD}x capacity nothing spilled"
    refused = outcomes["refused"]
    assert not refused.jobs and refused.refused, "a tenant that did not opt in must be refused as before"
    # The jobs answer what was refused, each once, with the request's own answer.
    proc = worker(jobs)
    try:
        for name in ("per-request", "by-policy"):
            for job_id, (request_id, row) in outcomes[name].jobs.items():
                done = wait_job(jobs, job_id, {jobs_pb2.JOB_STATE_COMPLETED}, key=keys[name])
                assert (done.total, done.succeeded, done.failed) == (1, 1, 0), done
                (result,) = all_results(jobs, job_id, 1, key=keys[name])
                assert result.custom_id == request_id
                np.testing.assert_allclose(decode(result.outputs[0].tensor), row * 2)
        # A call that timed out on the client's side, retried under its id: answered, or a job.
        asyncio.run(retry_timed_out(jobs, keys, outcomes))
    finally:
        proc.kill()
        proc.wait()
    # A retry of a spilled request, now that there is capacity, finds its job: not run twice.
    job_id, (request_id, row) = next(iter(outcomes["per-request"].jobs.items()))

    async def retry() -> AcceptedAsJob:
        async with AsyncClient(jobs.router, keys["per-request"], retries=0) as client:
            with pytest.raises(AcceptedAsJob) as again:
                await client.predict("echo", row, version="slow", request_id=request_id, spill_to_job=True)
            return again.value

    assert asyncio.run(retry()).job_id == job_id
