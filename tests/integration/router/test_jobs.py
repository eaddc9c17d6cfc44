"""Durable jobs over the real platform and a real Redis: a job's items are each answered
once, priced at the job rate; a retry under the job id is the same job and another tenant
cannot see it; a batcher killed with kill -9 mid-job leaves its items to another that takes
them over (XAUTOCLAIM), with no item lost or recorded twice; a cancelled job stops; an OpenAI
batch file runs from the CLI at the job price; Redis down for 5 s refuses submissions
clearly and the running job resumes after; a tenant's job limits (unfinished jobs, items a
day) refuse what is past them. Each test runs with jobs in Redis and in the registry
database (``ferryman up``'s store, where a worker's lease stands in for XAUTOCLAIM)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
from batcher_platform import REGISTRY_REFRESH_S
from harness import ServiceThread
from job_helpers import DONE_S, STARTED_S, Jobs, all_results, echo_items, wait_job, worker
from router_platform import E2E, MINILM_PRICE_PER_1K_TOKENS
from services import start_redis, wait_for_redis

from ferryman.tensors import decode
from ferryman.v1 import jobs_pb2
from ferryman_server.gpu_node.demo import echo
from ferryman_server.kernel.net import free_port
from ferryman_server.quota.cohost import CoHostedQuota
from ferryman_server.quota.settings import QuotaSettings
from ferryman_server.registry.specs import QuotaLimits
from ferryman_server.router.server import serve_router
from ferryman_server.router.settings import RouterSettings

# Left out of make test-fast: batcher processes, on both job stores.
pytestmark = pytest.mark.slow


@pytest.fixture(params=["redis", "registry"])
def jobs(request: pytest.FixtureRequest, jobs: Jobs) -> Jobs:
    """Every test here on both stores: Redis, and the registry database (``ferryman up``)."""
    if request.param == "redis":
        return jobs
    registry: Jobs = request.getfixturevalue("registry_jobs")
    return registry


def test_every_item_is_answered_once_and_the_job_is_the_tenants_alone(jobs: Jobs) -> None:
    items = echo_items(300)
    request = jobs_pb2.SubmitJobRequest(job_id="nightly-1", model="echo", items=items)
    proc = worker(jobs)
    try:
        job = jobs.stub().SubmitJob(request, metadata=jobs.metadata(), timeout=30)
        assert (job.state, job.total) == (jobs_pb2.JOB_STATE_QUEUED, 300)
        again = jobs.stub().SubmitJob(request, metadata=jobs.metadata(), timeout=30)  # a retry
        assert again.created_at == job.created_at
        watched: list[int] = []
        watch = jobs_pb2.WatchJobRequest(job_id="nightly-1")
        for event in jobs.stub().WatchJob(watch, metadata=jobs.metadata(), timeout=DONE_S):
            watched += [r.index for r in event.results]
        assert event.job.state == jobs_pb2.JOB_STATE_COMPLETED
        assert sorted(watched) == list(range(300))  # every result once, as it landed
        done = wait_job(jobs, "nightly-1", {jobs_pb2.JOB_STATE_COMPLETED})
    finally:
        proc.kill()
        proc.wait()
    results = all_results(jobs, "nightly-1", 300)
    assert (done.succeeded, done.failed) == (300, 0), [r.error for r in results if r.HasField("error")]
    assert sorted(r.index for r in results) == list(range(300))
    for result in results:
        sent = decode(items[result.index].inputs[0].tensor)
        assert result.custom_id == f"row-{result.index}"
        np.testing.assert_allclose(decode(result.outputs[0].tensor), sent * 2)
    other = jobs_pb2.SubmitJobRequest(job_id="nightly-1", model="echo", items=echo_items(3, seed=1))
    with pytest.raises(grpc.RpcError) as reused:
        jobs.stub().SubmitJob(other, metadata=jobs.metadata(), timeout=30)
    assert reused.value.code() == grpc.StatusCode.ALREADY_EXISTS
    with pytest.raises(grpc.RpcError) as foreign:
        jobs.stub().GetJob(
            jobs_pb2.GetJobRequest(job_id="nightly-1"), metadata=jobs.metadata("insider"), timeout=10
        )
    assert foreign.value.code() == grpc.StatusCode.NOT_FOUND
    listed = jobs.stub().ListJobs(jobs_pb2.ListJobsRequest(), metadata=jobs.metadata(), timeout=10)
    assert "nightly-1" in [j.job_id for j in listed.jobs]


def test_bad_jobs_are_refused_with_the_item_named(jobs: Jobs) -> None:
    bad = echo_items(5)
    bad[3].inputs[0].tensor.shape[:] = [1, echo.WIDTH + 1]
    for request, code in (
        (jobs_pb2.SubmitJobRequest(job_id="bad", model="echo", items=bad), grpc.StatusCode.INVALID_ARGUMENT),
        (
            jobs_pb2.SubmitJobRequest(job_id="", model="echo", items=echo_items(1)),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        (jobs_pb2.SubmitJobRequest(job_id="none", model="echo"), grpc.StatusCode.INVALID_ARGUMENT),
        (
            jobs_pb2.SubmitJobRequest(job_id="secret", model="secret", items=echo_items(1)),
            grpc.StatusCode.NOT_FOUND,
        ),
        # A real-time request's parameter bounds hold for a job's too.
        (
            jobs_pb2.SubmitJobRequest(
                job_id="many",
                model="echo",
                items=echo_items(1),
                parameters={str(i): "" for i in range(10_000)},
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        (
            jobs_pb2.SubmitJobRequest(
                job_id="huge", model="echo", items=echo_items(1), parameters={"k": "v" * (8 << 20)}
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
    ):
        with pytest.raises(grpc.RpcError) as refused:
            jobs.stub().SubmitJob(request, metadata=jobs.metadata(), timeout=30)
        assert refused.value.code() == code, refused.value.details()
    with pytest.raises(grpc.RpcError) as named:
        jobs.stub().SubmitJob(
            jobs_pb2.SubmitJobRequest(job_id="bad", model="echo", items=bad),
            metadata=jobs.metadata(),
            timeout=30,
        )
    assert "item 3" in (named.value.details() or "")


def test_a_worker_killed_mid_job_loses_and_doubles_nothing(jobs: Jobs) -> None:
    total = 400
    request = jobs_pb2.SubmitJobRequest(
        job_id="killed-1", model="echo", version="slow", items=echo_items(total, 2)
    )
    first = worker(jobs)
    jobs.stub().SubmitJob(request, metadata=jobs.metadata(), timeout=30)
    deadline = time.monotonic() + STARTED_S
    while True:  # some done, most not
        job = jobs.stub().GetJob(
            jobs_pb2.GetJobRequest(job_id="killed-1"), metadata=jobs.metadata(), timeout=10
        )
        if job.succeeded >= 8:
            break
        assert time.monotonic() < deadline, job
        time.sleep(0.1)
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert job.succeeded < total
    second = worker(jobs)
    try:
        done = wait_job(jobs, "killed-1", {jobs_pb2.JOB_STATE_COMPLETED}, timeout_s=DONE_S * 2)
    finally:
        second.kill()
        second.wait()
    assert (done.succeeded, done.failed) == (total, 0)
    assert sorted(r.index for r in all_results(jobs, "killed-1", total)) == list(range(total))


def test_a_cancelled_job_stops(jobs: Jobs) -> None:
    total = 200
    request = jobs_pb2.SubmitJobRequest(
        job_id="cancel-1", model="echo", version="slow", items=echo_items(total, 3)
    )
    proc = worker(jobs)
    try:
        jobs.stub().SubmitJob(request, metadata=jobs.metadata(), timeout=30)
        deadline = time.monotonic() + STARTED_S
        while (
            jobs.stub()
            .GetJob(jobs_pb2.GetJobRequest(job_id="cancel-1"), metadata=jobs.metadata(), timeout=10)
            .succeeded
            < 4
        ):
            assert time.monotonic() < deadline
            time.sleep(0.1)
        cancelled = jobs.stub().CancelJob(
            jobs_pb2.CancelJobRequest(job_id="cancel-1"), metadata=jobs.metadata(), timeout=10
        )
        assert cancelled.state == jobs_pb2.JOB_STATE_CANCELLED
        time.sleep(3.0)  # items already in flight may finish; nothing new starts
        settled = jobs.stub().GetJob(
            jobs_pb2.GetJobRequest(job_id="cancel-1"), metadata=jobs.metadata(), timeout=10
        )
        time.sleep(2.0)
        later = jobs.stub().GetJob(
            jobs_pb2.GetJobRequest(job_id="cancel-1"), metadata=jobs.metadata(), timeout=10
        )
    finally:
        proc.kill()
        proc.wait()
    assert later.succeeded == settled.succeeded < total
    assert later.state == jobs_pb2.JOB_STATE_CANCELLED


def test_an_openai_batch_file_runs_from_the_cli_at_half_the_price(jobs: Jobs, tmp_path: Path) -> None:
    lines = tmp_path / "batch.jsonl"
    texts = [f"document number {i} about rivers and boats" for i in range(40)]
    lines.write_text(
        "\n".join(
            json.dumps(
                {
                    "custom_id": f"doc-{i}",
                    "method": "POST",
                    "url": "/v1/embeddings",
                    "body": {"model": "minilm", "input": t},
                }
            )
            for i, t in enumerate(texts)
        )
    )
    env = {**os.environ, "FERRYMAN_TARGET": jobs.router, "FERRYMAN_API_KEY": jobs.e2e.keys["acme"]}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "ferryman_server.cli", "job", *args]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)

    proc = worker(jobs)
    try:
        submitted = cli("submit", str(lines), "--job-id", "embed-1", "--json")
        assert submitted.returncode == 0, submitted.stderr
        assert json.loads(submitted.stdout)["total"] == "40"  # int64 is a JSON string
        done = wait_job(jobs, "embed-1", {jobs_pb2.JOB_STATE_COMPLETED})
    finally:
        proc.kill()
        proc.wait()
    printed = cli("results", "embed-1")
    assert printed.returncode == 0, printed.stderr
    rows = [json.loads(line) for line in printed.stdout.splitlines()]
    assert [r["custom_id"] for r in rows] == [f"doc-{i}" for i in range(40)]
    assert all(len(r["outputs"]["embedding"][0]) == 384 for r in rows)
    tokens = sum(r.usage.input_tokens for r in all_results(jobs, "embed-1", 40))
    assert tokens > 0
    # The job price: half the version's (minilm: $1 per 1k tokens).
    assert done.cost_usd == pytest.approx(0.5 * tokens / 1000 * MINILM_PRICE_PER_1K_TOKENS)


def test_redis_down_for_five_seconds_refuses_submissions_clearly_and_running_jobs_resume(
    e2e: E2E, tmp_path: Path
) -> None:
    port = free_port()
    redis_dir = tmp_path / "redis"
    redis_dir.mkdir()
    server = start_redis(port, redis_dir, aof=True)  # what it held survives its restart
    assert wait_for_redis(port)
    url = f"redis://127.0.0.1:{port}/0"
    common = e2e.common.model_copy(update={"jobs_redis_url": url})
    settings = RouterSettings(listen="127.0.0.1:0", batchers=e2e.batcher)
    thread = ServiceThread(
        lambda stop, ready: serve_router(settings, CoHostedQuota(QuotaSettings()), common, stop, ready),
        "jobs",
    )
    outage = Jobs(e2e, url, thread.start())
    proc = worker(outage)
    try:
        total = 120
        request = jobs_pb2.SubmitJobRequest(
            job_id="outage-1", model="echo", version="slow", items=echo_items(total, 4)
        )
        outage.stub().SubmitJob(request, metadata=outage.metadata(), timeout=30)
        deadline = time.monotonic() + STARTED_S
        while (
            outage.stub()
            .GetJob(jobs_pb2.GetJobRequest(job_id="outage-1"), metadata=outage.metadata(), timeout=10)
            .succeeded
            < 4
        ):
            assert time.monotonic() < deadline
            time.sleep(0.1)
        server.terminate()
        server.wait()
        refused_at = time.monotonic()
        other = jobs_pb2.SubmitJobRequest(job_id="outage-2", model="echo", items=echo_items(2, 5))
        with pytest.raises(grpc.RpcError) as down:
            outage.stub().SubmitJob(other, metadata=outage.metadata(), timeout=30)
        assert down.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "job queue" in (down.value.details() or "")
        assert time.monotonic() - refused_at < 15  # bounded, not a hang
        time.sleep(max(0.0, 5.0 - (time.monotonic() - refused_at)))
        server = start_redis(port, redis_dir, aof=True)
        assert wait_for_redis(port)
        done = wait_job(outage, "outage-1", {jobs_pb2.JOB_STATE_COMPLETED}, timeout_s=DONE_S * 2)
        assert (done.succeeded, done.failed) == (total, 0)
        assert sorted(r.index for r in all_results(outage, "outage-1", total)) == list(range(total))
    finally:
        proc.kill()
        proc.wait()
        thread.stop()
        server.terminate()
        server.wait()


def test_job_limits_refuse_a_job_too_many_and_items_past_the_day(jobs: Jobs) -> None:
    key = jobs.e2e.new_tenant("jobber", QuotaLimits(jobs_in_flight=1, job_items_per_day=10))
    metadata = [("authorization", f"Bearer {key}")]

    def submit(job_id: str, items: int) -> jobs_pb2.Job:
        request = jobs_pb2.SubmitJobRequest(job_id=job_id, model="echo", items=echo_items(items, 6))
        job: jobs_pb2.Job = jobs.stub().SubmitJob(request, metadata=metadata, timeout=30)
        return job

    time.sleep(REGISTRY_REFRESH_S * 3)  # the jobs router's snapshot has the policy
    submit("limits-1", 5)  # no worker runs: it stays unfinished
    with pytest.raises(grpc.RpcError) as too_many:
        submit("limits-2", 1)
    assert too_many.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "jobs_in_flight" in (too_many.value.details() or "")
    jobs.stub().CancelJob(jobs_pb2.CancelJobRequest(job_id="limits-1"), metadata=metadata, timeout=10)
    with pytest.raises(grpc.RpcError) as past_the_day:
        submit("limits-3", 6)  # 5 + 6 > 10 today
    assert past_the_day.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "job_items_per_day" in (past_the_day.value.details() or "")
    assert submit("limits-4", 5).total == 5  # exactly at the day's limit
