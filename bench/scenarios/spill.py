"""Spill instead of shed: ``minilm`` offered ``--factor`` times its capacity, every request
with a ``--deadline-ms`` deadline, sent once with ``spill_to_job`` and once without.

Capacity is the closed-loop throughput at concurrency 32 (the ``minilm`` scenario's knee).
Then open-loop (evenly spaced) requests at ``--factor`` times it for ``--seconds``: with
spill, each must be answered in time or accepted as a job (its id in the error) whose
result arrives later; every job is then read back to its one result. Without spill, the
same load is refused as before. Nothing is retried (``retries=0``), so a request the
platform loses shows as lost.

    python -m bench.scenarios.spill [--factor 3] [--deadline-ms 500] [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from bench.scenarios.measure import CLOSED_DEADLINE_S, Point, load_spec, measure, scenario_options, table
from bench.scenarios.minilm import sentences
from bench.scenarios.platform import PlatformSpec, Running, ferryman
from bench.scenarios.quotas import private_redis
from ferryman.sdk import AcceptedAsJob, AsyncClient, FerrymanError
from ferryman.v1 import jobs_pb2, jobs_pb2_grpc
from ferryman_server.cli.bench.stats import percentile

CAPACITY_CONCURRENCY = 32
DRAIN_TIMEOUT_S = 600.0
POLL_S = 0.5


@dataclass
class Run:
    sent: int = 0
    in_time: list[float] = field(default_factory=list)
    """Latencies (s) of the answers that came within the deadline."""
    late: int = 0
    jobs: dict[str, str] = field(default_factory=dict)
    """job id -> request id."""
    learned_late: int = 0
    """Jobs the router queued after the call's deadline (the SDK looked them up)."""
    refused: Counter[str] = field(default_factory=Counter)
    wall_s: float = 0.0


async def offer(
    platform: Running, rate: float, seconds: float, deadline_s: float, spill: bool, tag: str
) -> Run:
    """Evenly spaced requests at ``rate`` for ``seconds``, each sentence new."""
    make = sentences()
    run = Run()
    async with AsyncClient(platform.address, platform.key, retries=0) as client:

        async def one(i: int) -> None:
            text = make(20_000_000 + i)[0].text.values[0]
            started = time.perf_counter()
            try:
                await client.predict(
                    "minilm", [text], timeout=deadline_s, request_id=f"{tag}-{i}", spill_to_job=spill
                )
            except AcceptedAsJob as accepted:
                run.jobs[accepted.job_id] = f"{tag}-{i}"
                run.learned_late += not accepted.refused_for
            except FerrymanError as refused:
                run.refused[refused.reason or refused.code.name] += 1
            else:
                took = time.perf_counter() - started
                if took <= deadline_s:
                    run.in_time.append(took)
                else:
                    run.late += 1

        tasks = []
        start = time.perf_counter()
        for i in range(int(rate * seconds)):
            await asyncio.sleep(max(0.0, start + i / rate - time.perf_counter()))
            tasks.append(asyncio.create_task(one(i)))
        await asyncio.gather(*tasks)
        run.sent, run.wall_s = len(tasks), time.perf_counter() - start
    return run


def drain(platform: Running, run: Run) -> dict[str, float]:
    """Wait for every job of ``run`` to end; how many answered, and when the last did."""
    stub = jobs_pb2_grpc.JobsStub(grpc.insecure_channel(platform.address))
    metadata = [("authorization", f"Bearer {platform.key}")]
    started = time.monotonic()
    pending = set(run.jobs)
    answered = failed = 0
    while pending:
        for job_id in list(pending):
            job = stub.GetJob(jobs_pb2.GetJobRequest(job_id=job_id), metadata=metadata, timeout=30)
            if job.state < jobs_pb2.JOB_STATE_COMPLETED:
                continue
            pending.discard(job_id)
            page = stub.GetJobResults(
                jobs_pb2.GetJobResultsRequest(job_id=job_id), metadata=metadata, timeout=30
            )
            ok = [r for r in page.results if not r.HasField("error") and r.custom_id == run.jobs[job_id]]
            answered += len(ok)
            failed += job.total - len(ok)
        if time.monotonic() - started > DRAIN_TIMEOUT_S:
            raise TimeoutError(f"{len(pending)} jobs not done")
        if pending:
            time.sleep(POLL_S)
    return {"answered": answered, "failed": failed, "drained_s": round(time.monotonic() - started, 1)}


def summary(run: Run, deadline_s: float) -> dict[str, object]:
    lost = run.sent - len(run.in_time) - len(run.jobs)
    return {
        "sent": run.sent,
        "offered_rps": round(run.sent / run.wall_s, 1),
        "answered_in_time": len(run.in_time),
        "p99_in_time_ms": round(percentile(run.in_time, 99) * 1000, 1) if run.in_time else None,
        "late": run.late,
        "accepted_as_jobs": len(run.jobs),
        "of_them_learned_after_the_deadline": run.learned_late,
        "refused": dict(run.refused),
        "lost": lost,
        "deadline_ms": deadline_s * 1000,
    }


def main() -> None:
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--factor", type=float, default=3.0, help="offered load over capacity")
        parser.add_argument("--deadline-ms", type=float, default=500.0)
        parser.add_argument("--seconds", type=float, default=10.0)

    opts, _ = scenario_options(__doc__, str(CAPACITY_CONCURRENCY), options)
    deadline_s = opts.deadline_ms / 1000
    points: list[Point] = []
    with (
        private_redis() as url,
        ferryman(PlatformSpec(models=("minilm",), env={"FERRYMAN_JOBS_REDIS_URL": url})) as platform,
    ):
        closed = load_spec(
            platform, "minilm", opts, concurrency=CAPACITY_CONCURRENCY, deadline_s=CLOSED_DEADLINE_S
        )
        points.append(
            measure("capacity", f"closed loop c={CAPACITY_CONCURRENCY}", closed, sentences(), platform.pids)
        )
        capacity = float(points[0].summary["throughput_rps"])
        rate = opts.factor * capacity
        print(table(points), flush=True)
        results: dict[str, object] = {"capacity_rps": capacity, "rate_rps": round(rate, 1)}
        refused = asyncio.run(offer(platform, rate, opts.seconds, deadline_s, spill=False, tag="shed"))
        results["without_spill"] = summary(refused, deadline_s)
        spilled = asyncio.run(offer(platform, rate, opts.seconds, deadline_s, spill=True, tag="spill"))
        results["with_spill"] = {**summary(spilled, deadline_s), "jobs": drain(platform, spilled)}
    print(json.dumps(results, indent=2))
    out: Path = opts.out
    (out / "spill-summary.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
