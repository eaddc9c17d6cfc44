"""Jobs count in the tenant's daily spend, over the real platform and a real Redis: a job's
cost is charged once (a limit between one and two jobs' cost still takes a second job),
real-time requests are judged on the same spend, a job that crosses the limit is cancelled
mid-run with what it did not run never charged, and past the limit no job is accepted."""

from __future__ import annotations

import time
import uuid

import grpc
import pytest
from job_helpers import JOB_CHARGE_EVERY_S, Jobs, wait_job, worker

from ferryman.v1 import common_pb2, inference_pb2, inference_pb2_grpc, jobs_pb2
from ferryman_server.registry.specs import QuotaLimits

# Left out of make test-fast: jobs charged over several charging periods.
pytestmark = pytest.mark.slow

CHARGED_S = JOB_CHARGE_EVERY_S * 6
"""Long enough for the jobs router to have charged what a finished job cost."""
NO_LIMIT_USD = 1000.0
SNAPSHOT_S = 1.5
"""Long enough for the jobs router to read a registry change (tenants, policies)."""


def texts(n: int, seed: str) -> list[jobs_pb2.JobItem]:
    return [
        jobs_pb2.JobItem(
            custom_id=f"{seed}-{i}",
            inputs=[
                common_pb2.NamedTensor(
                    name="text",
                    text=common_pb2.TextList(values=[f"{seed} document {i} about rivers and boats"]),
                )
            ],
        )
        for i in range(n)
    ]


def test_job_cost_counts_once_in_the_daily_spend_and_the_limit_holds(jobs: Jobs) -> None:
    e2e = jobs.e2e
    # A limit from the start, so the spend is counted from the first job.
    name = f"payer-{uuid.uuid4().hex[:6]}"
    key = e2e.writer.create_tenant(name).plaintext
    e2e.writer.set_quota(name, QuotaLimits(cost_per_day_usd=NO_LIMIT_USD))
    time.sleep(SNAPSHOT_S)
    metadata = jobs.metadata(key=key)
    stub = jobs.stub()

    def submit(job_id: str, items: list[jobs_pb2.JobItem]) -> jobs_pb2.Job:
        job: jobs_pb2.Job = stub.SubmitJob(
            jobs_pb2.SubmitJobRequest(job_id=job_id, model="minilm", items=items),
            metadata=metadata,
            timeout=30,
        )
        return job

    proc = worker(jobs)
    try:
        submit("first", texts(40, "a"))
        first = wait_job(jobs, "first", {jobs_pb2.JOB_STATE_COMPLETED}, key=key)
        assert first.cost_usd > 0
        time.sleep(CHARGED_S)
        # Charged once: with the limit at 1.5 jobs' cost a second job is still taken...
        e2e.writer.set_quota(name, QuotaLimits(cost_per_day_usd=first.cost_usd * 1.5))
        time.sleep(SNAPSHOT_S)
        second = submit("second", texts(400, "b"))  # ...and cancelled once it crosses the limit
        ended = wait_job(
            jobs, "second", {jobs_pb2.JOB_STATE_CANCELLED, jobs_pb2.JOB_STATE_COMPLETED}, key=key
        )
    finally:
        proc.kill()
        proc.wait()
    assert second.total == 400
    assert ended.state == jobs_pb2.JOB_STATE_CANCELLED, ended
    assert 0 < ended.succeeded < 400, ended
    time.sleep(CHARGED_S)
    # Past the limit: no new job, and real-time requests see the same spend.
    with pytest.raises(grpc.RpcError) as refused:
        submit("third", texts(1, "c"))
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "cost limit" in (refused.value.details() or "")
    predict = inference_pb2_grpc.InferenceStub(grpc.insecure_channel(jobs.router))
    with pytest.raises(grpc.RpcError) as realtime:
        predict.Predict(
            inference_pb2.PredictRequest(model="minilm", inputs=texts(1, "d")[0].inputs),
            metadata=metadata,
            timeout=10,
        )
    assert realtime.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "cost_per_day" in (realtime.value.details() or "")
