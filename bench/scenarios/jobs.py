"""A large embedding job beside real-time traffic: ``--items`` minilm sentences submitted as
one job while open-loop real-time requests (``--rate`` per second, the same model) run on
the same platform, the job's items taking only the capacity the real-time ones leave.
Real-time latency is measured without the job, during it, and after it, in one run; the
job's completion time and that every item was answered once are reported.

    python -m bench.scenarios.jobs [--items 10000] [--rate 20]
"""

from __future__ import annotations

import argparse
import json
import time
import uuid

import grpc

from bench.scenarios.measure import (
    CLOSED_DEADLINE_S,
    Point,
    load_spec,
    measure,
    scenario_options,
    table,
    write_json,
)
from bench.scenarios.minilm import sentences
from bench.scenarios.platform import PlatformSpec, ferryman
from bench.scenarios.quotas import private_redis
from ferryman.v1 import jobs_pb2, jobs_pb2_grpc

SUBMIT_TIMEOUT_S = 300.0
DONE_TIMEOUT_S = 1800.0
POLL_S = 1.0


def main() -> None:
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--items", type=int, default=10_000, help="job items")
        parser.add_argument("--rate", type=float, default=20.0, help="real-time requests per second")

    opts, _ = scenario_options(__doc__, "1", options)
    make = sentences()
    points: list[Point] = []
    with (
        private_redis() as url,
        ferryman(PlatformSpec(models=("minilm",), env={"FERRYMAN_JOBS_REDIS_URL": url})) as platform,
    ):
        realtime = load_spec(
            platform, "minilm", opts, rate=opts.rate, concurrency=1, deadline_s=CLOSED_DEADLINE_S
        )
        points.append(measure("realtime, no job", f"rate={opts.rate:g}", realtime, make, platform.pids))
        stub = jobs_pb2_grpc.JobsStub(
            grpc.insecure_channel(platform.address, options=[("grpc.max_send_message_length", -1)])
        )
        metadata = [("authorization", f"Bearer {platform.key}")]
        job_id = uuid.uuid4().hex
        # Job sentences differ from the real-time ones: nothing coalesces across the two.
        items = [jobs_pb2.JobItem(custom_id=str(i), inputs=make(10_000_000 + i)) for i in range(opts.items)]
        started = time.monotonic()
        stub.SubmitJob(
            jobs_pb2.SubmitJobRequest(job_id=job_id, model="minilm", items=items),
            metadata=metadata,
            timeout=SUBMIT_TIMEOUT_S,
        )
        submitted_s = time.monotonic() - started
        points.append(measure("realtime, job running", f"rate={opts.rate:g}", realtime, make, platform.pids))
        while True:
            job = stub.GetJob(jobs_pb2.GetJobRequest(job_id=job_id), metadata=metadata, timeout=30)
            if job.state >= jobs_pb2.JOB_STATE_COMPLETED:
                break
            if time.monotonic() - started > DONE_TIMEOUT_S:
                raise TimeoutError(f"job not done: {job}")
            time.sleep(POLL_S)
        done_s = time.monotonic() - started
        indexes: list[int] = []
        for offset in range(0, opts.items, 1000):
            page = stub.GetJobResults(
                jobs_pb2.GetJobResultsRequest(job_id=job_id, offset=offset, limit=1000),
                metadata=metadata,
                timeout=60,
            )
            indexes += [r.index for r in page.results]
        points.append(
            measure("realtime, after the job", f"rate={opts.rate:g}", realtime, make, platform.pids)
        )
    print()
    print(table(points))
    base = float(points[0].summary["p99_ms"])
    during = float(points[1].summary["p99_ms"])
    after = float(points[2].summary["p99_ms"])
    summary = {
        "items": opts.items,
        "submit_s": round(submitted_s, 1),
        "done_s": round(done_s, 1),
        "items_per_s": round(opts.items / done_s, 1),
        "succeeded": job.succeeded,
        "failed": job.failed,
        "each_once": sorted(indexes) == list(range(opts.items)),
        "p99_during_over_before": round(during / base, 3),
        "p99_after_over_before": round(after / base, 3),
    }
    print(json.dumps(summary))
    write_json(opts.out / "jobs.json", "jobs", points)
    (opts.out / "jobs-summary.json").write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
