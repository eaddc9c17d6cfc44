"""A big batch output file streams: three parallel fetches of a ~43 MB output (640 items,
each 16 texts' 384-float embeddings: the most the platform's MiniLM takes in one request)
leave another tenant's calls answered within their deadline, and the memory held at the
peak (tracemalloc: every Python and numpy allocation of this process, the router's
included) is less than one copy of the file (built whole, as before, three fetches held
three copies and their Python floats). The results are written straight into the real job
store, as a job worker would, so no model has to embed 10,240 texts first. Part of the
abuse suite."""

from __future__ import annotations

import asyncio
import json
import statistics
import threading
import time
import tracemalloc
import urllib.request
import uuid
from collections.abc import Iterator

import grpc
import numpy as np
import pytest
from job_helpers import Jobs
from router_platform import E2E

from ferryman.tensors import encode
from ferryman.v1 import common_pb2, inference_pb2, inference_pb2_grpc, jobs_pb2
from ferryman_server.gpu_node.demo import echo
from ferryman_server.jobs.port import open_job_queue

pytestmark = pytest.mark.abuse

ITEMS = 640
TEXTS_PER_ITEM = 16
DIMENSIONS = 384
FETCHES = 3
DEADLINE_S = 2.0
"""Another tenant's calls: the old whole-file build stalled them 3.1-10.1 s."""
TIMEOUT_S = 120.0
CHUNK = 64 * 1024


def multipart(content: bytes) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.jsonl"\r\n'
            "Content-Type: application/jsonl\r\n\r\n"
        ).encode()
        + content
        + f"\r\n--{boundary}--\r\n".encode()
    )
    return body, f"multipart/form-data; boundary={boundary}"


def call(
    http: str, path: str, key: str, body: bytes | None = None, content_type: str = ""
) -> dict[str, object]:
    headers = {"Authorization": f"Bearer {key}", **({"Content-Type": content_type} if content_type else {})}
    request = urllib.request.Request(f"{http}{path}", data=body, headers=headers)
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
        document: dict[str, object] = json.loads(answer.read())
        return document


async def answer_every_item(jobs: Jobs, tenant: str, job_id: str) -> None:
    """Be the job worker: every item answered with a big embedding, in the real store."""
    store = open_job_queue(jobs.e2e.common.model_copy(update={"jobs_redis_url": jobs.redis}), 5.0)
    assert store is not None
    await store.ensure_group()
    rng = np.random.default_rng(0)
    answered = 0
    give_up = time.monotonic() + TIMEOUT_S
    try:
        while answered < ITEMS and time.monotonic() < give_up:
            for claimed in await store.claim("stream-test", 64, 100, 60_000):
                assert claimed.tenant == tenant and claimed.job_id == job_id
                item = jobs_pb2.JobItem.FromString(claimed.item)
                embedding = rng.standard_normal((TEXTS_PER_ITEM, DIMENSIONS)).astype(np.float32)
                result = jobs_pb2.JobItemResult(
                    index=claimed.index,
                    custom_id=item.custom_id,
                    outputs=[common_pb2.NamedTensor(name="embedding", tensor=encode(embedding))],
                )
                result.usage.items = TEXTS_PER_ITEM
                result.usage.input_tokens = TEXTS_PER_ITEM * 8
                await store.record(claimed, result.SerializeToString(), True, 0.0)
                await store.ack(claimed)
                answered += 1
    finally:
        await store.close()
    assert answered == ITEMS


@pytest.fixture(scope="module")
def big_output(jobs: Jobs) -> Iterator[tuple[str, str, int]]:
    """(key, output file id, its size) of a finished batch with a big output."""
    key = jobs.e2e.keys["acme"]
    lines = [
        json.dumps(
            {
                "custom_id": f"doc-{i}",
                "method": "POST",
                "url": "/v1/embeddings",
                "body": {"model": "minilm", "input": [f"text {i}.{j}" for j in range(TEXTS_PER_ITEM)]},
            }
        )
        for i in range(ITEMS)
    ]
    body, content_type = multipart("\n".join(lines).encode())
    upload = call(jobs.http, "/v1/files", key, body, content_type)
    request = {"input_file_id": upload["id"], "endpoint": "/v1/embeddings", "completion_window": "24h"}
    batch = call(jobs.http, "/v1/batches", key, json.dumps(request).encode(), "application/json")
    asyncio.run(answer_every_item(jobs, "acme", str(batch["id"])))
    give_up = time.monotonic() + TIMEOUT_S
    while batch["status"] != "completed":
        assert time.monotonic() < give_up, batch["status"]
        time.sleep(0.2)
        batch = call(jobs.http, f"/v1/batches/{batch['id']}", key)
    output = str(batch["output_file_id"])
    size = call(jobs.http, f"/v1/files/{output}", key)["bytes"]
    assert isinstance(size, int)
    yield key, output, size


def fetch(http: str, path: str, key: str) -> tuple[int, int]:
    """(bytes, lines) of a file's content, read a chunk at a time and kept nowhere."""
    request = urllib.request.Request(f"{http}{path}", headers={"Authorization": f"Bearer {key}"})
    size = lines = 0
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
        while chunk := answer.read(CHUNK):
            size += len(chunk)
            lines += chunk.count(b"\n")
    return size, lines


def test_parallel_fetches_of_a_big_output_leave_others_served_and_memory_bounded(
    e2e: E2E, jobs: Jobs, big_output: tuple[str, str, int]
) -> None:
    key, output, size = big_output
    light = e2e.keys["insider"]
    stub = inference_pb2_grpc.InferenceStub(grpc.insecure_channel(e2e.router))
    x = encode(np.ones((1, echo.WIDTH), np.float32))
    request = inference_pb2.PredictRequest(
        model="echo", inputs=[common_pb2.NamedTensor(name="input", tensor=x)]
    )
    done = threading.Event()
    latencies: list[float] = []
    failures: list[str] = []

    def light_tenant() -> None:
        while not done.is_set():
            started = time.monotonic()
            try:
                stub.Predict(request, metadata=(("authorization", f"Bearer {light}"),), timeout=DEADLINE_S)
                latencies.append(time.monotonic() - started)
            except grpc.RpcError as exc:
                failures.append(exc.code().name)
            time.sleep(0.01)

    tracemalloc.start()
    before, _ = tracemalloc.get_traced_memory()
    helpers = [threading.Thread(target=light_tenant)]
    for helper in helpers:
        helper.start()
    results: list[tuple[int, int]] = []
    fetchers = [
        threading.Thread(target=lambda: results.append(fetch(jobs.http, f"/v1/files/{output}/content", key)))
        for _ in range(FETCHES)
    ]
    started = time.monotonic()
    for fetcher in fetchers:
        fetcher.start()
    for fetcher in fetchers:
        fetcher.join(TIMEOUT_S)
    took = time.monotonic() - started
    done.set()
    for helper in helpers:
        helper.join()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    growth = peak - before
    print(
        f"\n{FETCHES} fetches of {size / 1e6:.1f} MB in {took:.1f} s; light tenant: {len(latencies)} calls, "
        f"p50 {statistics.median(latencies) * 1000:.1f} ms, max {max(latencies) * 1000:.0f} ms; "
        f"peak held {growth / 1e6:.1f} MB"
    )
    assert results == [(size, ITEMS)] * FETCHES, "every fetch got the whole file"
    assert not failures, failures
    assert latencies, "the light tenant was answered while the fetches ran"
    assert growth < size, (
        f"memory grew {growth / 1e6:.0f} MB for a {size / 1e6:.0f} MB file fetched {FETCHES}x"
    )
