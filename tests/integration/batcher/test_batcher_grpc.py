"""The batcher over real gRPC with real nodes: batching, coalescing, isolation, deadlines."""

from __future__ import annotations

import threading
import time
import uuid

import grpc
import numpy as np
import torch
from batcher_client import OpenStream, item, submit_all
from batcher_platform import SLOW_MS, Platform
from harness import ServiceThread
from internal import internal_channel
from metrics_scrape import sample
from node_helpers import POISON

from ferryman.errors import unpack_details
from ferryman.tensors import decode
from ferryman.v1 import batcher_pb2, batcher_pb2_grpc
from ferryman_server.batcher.server import serve_batcher
from ferryman_server.batcher.settings import BatcherSettings
from ferryman_server.gpu_node.demo import echo, mlp
from ferryman_server.registry.db import make_engine
from ferryman_server.registry.reader import RegistryReader

OK = 0
RNG = np.random.default_rng(3)


def rid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def row(value: float = 1.0) -> np.ndarray:
    return np.full((1, echo.WIDTH), value, dtype=np.float32)


def test_concurrent_requests_form_batches_with_correct_outputs(platform: Platform) -> None:
    inputs = {rid("mlp"): RNG.standard_normal((1, 512), dtype=np.float32) for _ in range(64)}
    results = submit_all(platform.batcher, [item(r, x, model="mlp") for r, x in inputs.items()])
    model = mlp.build_mlp()
    assert len(results) == 64
    for request_id, x in inputs.items():
        result = results[request_id]
        assert result.status.code == OK, result.status.message
        expected = model(torch.from_numpy(x)).detach().numpy()
        np.testing.assert_allclose(decode(result.outputs[0].tensor), expected, rtol=1e-4, atol=1e-5)
    sizes = [r.timing.batch_size for r in results.values()]
    assert max(sizes) > 1, sizes
    assert sample(platform.metrics, "ferryman_batch_size_count", model="mlp", version="1") < 64


def test_identical_concurrent_requests_run_once(platform: Platform) -> None:
    params = {"delay_ms": "200", "case": uuid.uuid4().hex}
    before = sample(platform.metrics, "ferryman_batch_size_count", model="echo", version="1")
    coalesced_before = sample(platform.metrics, "ferryman_coalesced_total", model="echo", version="1")
    ids = [rid("same") for _ in range(32)]
    results = submit_all(platform.batcher, [item(r, row(7.0), parameters=params) for r in ids])
    assert all(results[r].status.code == OK for r in ids)
    assert all(np.array_equal(decode(results[r].outputs[0].tensor), row(14.0)) for r in ids)
    assert sum(results[r].coalesced for r in ids) == 31
    assert sample(platform.metrics, "ferryman_batch_size_count", model="echo", version="1") == before + 1
    assert (
        sample(platform.metrics, "ferryman_coalesced_total", model="echo", version="1")
        == coalesced_before + 31
    )


def test_different_tenants_do_not_share(platform: Platform) -> None:
    params = {"delay_ms": "100", "case": uuid.uuid4().hex}
    results = submit_all(
        platform.batcher,
        [
            item("t-a", row(2.0), tenant="acme", parameters=params),
            item("t-b", row(2.0), tenant="globex", parameters=params),
        ],
    )
    assert not results["t-a"].coalesced and not results["t-b"].coalesced


def test_poison_item_fails_alone_and_leaves_one_dead_letter(platform: Platform) -> None:
    reader = RegistryReader(make_engine(platform.registry_url))
    letters_before = len(reader.dead_letters(limit=1000))
    ids = [rid("clean") for _ in range(15)]
    poison_id = rid("poison")
    items = [item(r, row(float(i)), version="poison") for i, r in enumerate(ids)]
    items.insert(7, item(poison_id, row(POISON), version="poison"))
    results = submit_all(platform.batcher, items)
    for i, r in enumerate(ids):
        assert results[r].status.code == OK, results[r].status.message
        np.testing.assert_array_equal(decode(results[r].outputs[0].tensor), row(float(i)) * 2)
    failed = results[poison_id]
    assert failed.status.code == grpc.StatusCode.INTERNAL.value[0]
    assert "poison value" in failed.status.message
    assert max(results[r].timing.batch_size for r in ids) > 1, "the poison must have shared a batch"
    deadline = __import__("time").monotonic() + 5
    while (
        len(reader.dead_letters(limit=1000)) == letters_before and __import__("time").monotonic() < deadline
    ):
        threading.Event().wait(0.05)
    letters = reader.dead_letters(limit=1000)
    assert len(letters) == letters_before + 1
    assert (letters[0].request_id, letters[0].version, letters[0].tenant) == (poison_id, "poison", "acme")
    assert len(letters[0].input_sha256) == 64 and "poison value" in letters[0].error


def test_item_that_cannot_meet_its_deadline_never_reaches_a_node(platform: Platform) -> None:
    before = sample(platform.metrics, "ferryman_batch_size_count", model="echo", version="slow")
    results = submit_all(platform.batcher, [item("late", row(), version="slow", budget_s=SLOW_MS / 1000 / 3)])
    late = results["late"]
    assert late.status.code == grpc.StatusCode.DEADLINE_EXCEEDED.value[0]
    assert unpack_details(late.status)["ErrorInfo"].reason == "DEADLINE_UNMEETABLE"  # type: ignore[attr-defined]
    assert sample(platform.metrics, "ferryman_batch_size_count", model="echo", version="slow") == before


def test_full_queue_answers_resource_exhausted_with_retry_delay(platform: Platform) -> None:
    ids = [rid("flood") for _ in range(120)]
    results = submit_all(
        platform.batcher, [item(r, row(float(i)), version="slow", budget_s=60) for i, r in enumerate(ids)]
    )
    codes = [results[r].status.code for r in ids]
    exhausted = [
        results[r] for r in ids if results[r].status.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    ]
    assert exhausted, "a 64-row queue must overflow with 120 slow items"
    assert codes.count(OK) + len(exhausted) == len(ids)
    retry = unpack_details(exhausted[0].status)["RetryInfo"]
    assert retry.retry_delay.ToTimedelta().total_seconds() > 0  # type: ignore[attr-defined]


def test_a_leaving_waiter_does_not_cancel_shared_work(platform: Platform) -> None:
    params = {"delay_ms": "300", "case": uuid.uuid4().hex}
    first, second = OpenStream(platform.batcher), OpenStream(platform.batcher)
    try:
        first.send(item("leaver", row(3.0), parameters=params))
        threading.Event().wait(0.05)
        second.send(item("stayer", row(3.0), parameters=params))
        threading.Event().wait(0.05)
        cancel = item("leaver", row(3.0), parameters=params)
        cancel.cancel = True
        first.send(cancel)
        result = second.receive()
        assert result.request_id == "stayer" and result.status.code == OK and result.coalesced
        np.testing.assert_array_equal(decode(result.outputs[0].tensor), row(6.0))
    finally:
        first.close()
        second.close()


def test_cacheable_version_answers_repeats_from_cache(platform: Platform) -> None:
    value = float(RNG.integers(1, 1_000_000))
    first = submit_all(platform.batcher, [item("c1", row(value), version="cached")])["c1"]
    second = submit_all(platform.batcher, [item("c2", row(value), version="cached")])["c2"]
    assert first.status.code == OK and not first.cached
    assert second.status.code == OK and second.cached
    np.testing.assert_array_equal(decode(second.outputs[0].tensor), row(value * 2))


def test_with_coalescing_off_identical_requests_each_run(platform: Platform) -> None:
    settings = BatcherSettings(listen="127.0.0.1:0", coalesce=False)
    batcher = ServiceThread(
        lambda stop, ready: serve_batcher(settings, platform.common, stop, ready), "batcher"
    )
    address = batcher.start()
    try:
        time.sleep(0.3)  # its first replica refresh
        params = {"delay_ms": "50", "case": uuid.uuid4().hex}
        ids = [rid("twin") for _ in range(8)]
        results = submit_all(address, [item(r, row(3.0), parameters=params) for r in ids])
    finally:
        batcher.stop()
    assert all(results[r].status.code == OK for r in ids)
    assert all(np.array_equal(decode(results[r].outputs[0].tensor), row(6.0)) for r in ids)
    assert not any(results[r].coalesced for r in ids)


def test_parameter_sets_are_bounded_and_idle_queues_reclaimed(platform: Platform) -> None:
    """2,000 distinct parameter sets (a caller's way to multiply queues) never leave more
    than max_parameter_sets queues of a version behind, and the version keeps serving."""
    limit = BatcherSettings().max_parameter_sets
    reasons: set[str] = set()
    for start in range(0, 2000, 100):
        # One burst of 100 sets at once: at most `limit` run, the rest are refused.
        burst = [item(rid("p"), row(float(i)), parameters={"k": str(i)}) for i in range(start, start + 100)]
        results = list(submit_all(platform.batcher, burst).values())
        assert any(r.status.code == 0 for r in results)
        for refused in (r.status for r in results if r.status.code != 0):
            # Refused for the bound, never left to time out: queues of one version share
            # replicas, and a slot freed by one wakes the others.
            assert refused.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
            info = unpack_details(refused)["ErrorInfo"]
            reasons.add(info.reason)  # type: ignore[attr-defined]
    assert "TOO_MANY_PARAMETER_SETS" in reasons
    with internal_channel(platform.batcher) as channel:
        stats = batcher_pb2_grpc.BatcherStub(channel).QueueStats(batcher_pb2.QueueStatsRequest(), timeout=10)
    assert sum(1 for q in stats.queues if q.model == "echo" and q.version == "1") <= limit
    plain = submit_all(platform.batcher, [item(rid("after"), row(1.0))])
    assert all(r.status.code == 0 for r in plain.values())
