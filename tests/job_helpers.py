"""Durable jobs in tests: the jobs router on the end-to-end platform (``jobs`` in the
router tests' conftest), job-worker batcher processes, and reading a job to its end."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field

import grpc
import numpy as np
from router_platform import E2E

from ferryman.tensors import encode
from ferryman.v1 import common_pb2, jobs_pb2, jobs_pb2_grpc
from ferryman_server.gpu_node.demo import echo
from ferryman_server.kernel.net import free_port

JOBS_REDIS_DB = 5
JOB_CHARGE_EVERY_S = 0.5
"""The jobs router charges job cost to tenants' spend this often."""
CLAIM_IDLE_S = 2.0
DONE_S = 120.0
STARTED_S = 60.0


@dataclass
class Jobs:
    e2e: E2E
    redis: str
    """The jobs' Redis; empty: they live in the registry database."""
    router: str
    http: str = ""
    """The router's HTTP doors (OpenAI batches), as a base URL."""

    channel: grpc.Channel | None = field(default=None, repr=False)
    """One channel for every call (a channel per call would leave hundreds open)."""

    def stub(self) -> jobs_pb2_grpc.JobsStub:
        if self.channel is None:
            self.channel = grpc.insecure_channel(self.router)
        return jobs_pb2_grpc.JobsStub(self.channel)

    def metadata(self, tenant: str = "acme", key: str = "") -> list[tuple[str, str]]:
        """The call metadata of a platform tenant, or of the tenant of ``key``."""
        return [("authorization", f"Bearer {key or self.e2e.keys[tenant]}")]


def worker(jobs: Jobs) -> subprocess.Popen[bytes]:
    """A batcher process whose job worker takes items from the queue."""
    env = {
        **os.environ,
        "FERRYMAN_DATABASE_URL": jobs.e2e.registry_url,
        "FERRYMAN_DATA_DIR": str(jobs.e2e.common.data_dir),
        **({"FERRYMAN_JOBS_REDIS_URL": jobs.redis} if jobs.redis else {"FERRYMAN_JOBS_IN_REGISTRY": "true"}),
        "FERRYMAN_BATCHER_JOB_CLAIM_IDLE_S": str(CLAIM_IDLE_S),
        "FERRYMAN_REGISTRY_REFRESH_S": "0.2",
        "FERRYMAN_LOG_LEVEL": "WARNING",
    }
    command = [
        sys.executable,
        "-m",
        "ferryman_server.cli",
        "serve",
        "batcher",
        "--listen",
        f"127.0.0.1:{free_port()}",
    ]
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def echo_items(n: int, seed: int = 0) -> list[jobs_pb2.JobItem]:
    rng = np.random.default_rng(seed)
    return [
        jobs_pb2.JobItem(
            custom_id=f"row-{i}",
            inputs=[
                common_pb2.NamedTensor(
                    name="input", tensor=encode(rng.standard_normal((1, echo.WIDTH), np.float32))
                )
            ],
        )
        for i in range(n)
    ]


def wait_job(
    jobs: Jobs, job_id: str, until: set[int], timeout_s: float = DONE_S, key: str = ""
) -> jobs_pb2.Job:
    deadline = time.monotonic() + timeout_s
    while True:
        job: jobs_pb2.Job = jobs.stub().GetJob(
            jobs_pb2.GetJobRequest(job_id=job_id), metadata=jobs.metadata(key=key), timeout=10
        )
        if job.state in until:
            return job
        assert time.monotonic() < deadline, job
        time.sleep(0.2)


def all_results(jobs: Jobs, job_id: str, total: int, key: str = "") -> list[jobs_pb2.JobItemResult]:
    got: list[jobs_pb2.JobItemResult] = []
    for offset in range(0, total, 1000):
        page = jobs.stub().GetJobResults(
            jobs_pb2.GetJobResultsRequest(job_id=job_id, offset=offset, limit=1000),
            metadata=jobs.metadata(key=key),
            timeout=10,
        )
        got += page.results
    return got
