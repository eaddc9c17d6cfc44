"""Feedback's bounds and served log, and shadow traffic's mirroring and comparison, with a
fake batcher (no sockets)."""

from __future__ import annotations

import asyncio

import numpy as np

from ferryman.tensors import encode
from ferryman.v1 import batcher_pb2, common_pb2, inference_pb2
from ferryman_server.kernel.scopes import SHADOW_SCOPE
from ferryman_server.registry.snapshot import RouteRecord, TenantRecord
from ferryman_server.router.feedback import MemoryServedLog, Served, check
from ferryman_server.router.metrics import RouterMetrics
from ferryman_server.router.settings import RouterSettings
from ferryman_server.router.shadow import Shadower, same_outputs

TENANT = TenantRecord("acme", 2, frozenset(), False)
SERVED = Served("m", "2", 97)


def tensor(values: list[float]) -> common_pb2.NamedTensor:
    return common_pb2.NamedTensor(name="output", tensor=encode(np.array([values], dtype=np.float32)))


def test_the_served_log_forgets_after_its_window_and_past_its_size() -> None:
    now = [0.0]
    log = MemoryServedLog(window_s=60, max_entries=2, clock=lambda: now[0])
    log.remember("acme", "r1", SERVED)
    assert asyncio.run(log.recall("acme", "r1")) == SERVED
    assert asyncio.run(log.recall("other", "r1")) is None  # only the tenant that asked
    log.remember("acme", "r2", SERVED)
    log.remember("acme", "r3", SERVED)
    assert asyncio.run(log.recall("acme", "r1")) is None  # the oldest went first
    now[0] = 61.0
    assert asyncio.run(log.recall("acme", "r3")) is None


def test_feedback_fields_are_bounded() -> None:
    ok = inference_pb2.FeedbackRequest(request_id="r1", metric="conversion", value=1.0)
    assert check(ok) == []
    bad = [
        inference_pb2.FeedbackRequest(request_id="", metric="conversion"),
        inference_pb2.FeedbackRequest(request_id="r" * 129, metric="conversion"),
        inference_pb2.FeedbackRequest(request_id="r1", metric="no spaces"),
        inference_pb2.FeedbackRequest(request_id="r1", metric="x" * 65),
        inference_pb2.FeedbackRequest(request_id="r1", metric="m", value=float("nan")),
        inference_pb2.FeedbackRequest(request_id="r1", metric="m", value=float("inf")),
        inference_pb2.FeedbackRequest(request_id="r1", metric="m", value=1e13),
    ]
    assert all(len(check(request)) == 1 for request in bad)


def test_answers_compare_within_tolerance_by_name_and_shape() -> None:
    assert same_outputs([tensor([1.0, 2.0])], [tensor([1.0, 2.0000001])], 1e-4, 1e-5)
    assert not same_outputs([tensor([1.0, 2.0])], [tensor([1.0, 2.5])], 1e-4, 1e-5)
    assert not same_outputs([tensor([1.0, 2.0])], [tensor([1.0, 2.0, 3.0])], 1e-4, 1e-5)
    renamed = common_pb2.NamedTensor(name="other", tensor=tensor([1.0]).tensor)
    assert not same_outputs([tensor([1.0])], [renamed], 1e-4, 1e-5)


class FakeBatchers:
    """Answers each item with ``answer`` after ``delay_s``; keeps what it was sent."""

    def __init__(self, answer: list[float] | None, delay_s: float = 0.0, code: int = 13) -> None:
        self.answer = answer
        self.delay_s = delay_s
        self.code = code
        self.items: list[batcher_pb2.SubmitItem] = []

    async def submit(self, item: batcher_pb2.SubmitItem, deadline: float) -> batcher_pb2.ItemResult:
        self.items.append(item)
        await asyncio.sleep(self.delay_s)
        if self.answer is None:
            return batcher_pb2.ItemResult(
                request_id=item.request_id, status={"code": self.code, "message": "boom"}
            )
        return batcher_pb2.ItemResult(request_id=item.request_id, outputs=[tensor(self.answer)])


def run_shadows(
    batchers: FakeBatchers, percent: int, requests: int, *, fallback: bool = False, max_inflight: int = 64
) -> RouterMetrics:
    metrics = RouterMetrics(max_tenant_labels=10)
    settings = RouterSettings(shadow_max_inflight=max_inflight)
    route = RouteRecord("m", (("1", 100),), "none", "salt", "", shadow_version="2", shadow_percent=percent)
    draws = iter([i / requests for i in range(requests)])

    async def main() -> None:
        shadower = Shadower(settings, batchers, metrics, lambda m, v: True, rng=lambda: next(draws))  # type: ignore[arg-type]
        request = inference_pb2.PredictRequest(model="m", inputs=[tensor([1.0, 2.0])])
        response = inference_pb2.PredictResponse(
            model="m", version="1", fallback=fallback, outputs=[tensor([2.0, 4.0])]
        )
        for _ in range(requests):
            shadower.answered(TENANT, route, request, response)
        await asyncio.sleep(0.05)
        await shadower.close()

    asyncio.run(main())
    return metrics


def counted(metrics: RouterMetrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, {"model": "m", "version": "2", **labels})
    return value or 0.0


def test_half_of_the_answers_are_mirrored_as_uncharged_low_priority_shadow_items() -> None:
    batchers = FakeBatchers([2.0, 4.0])
    metrics = run_shadows(batchers, percent=50, requests=100)
    assert len(batchers.items) == 50
    item = batchers.items[0]
    assert (item.tenant, item.version, item.shadow, item.priority) == (
        SHADOW_SCOPE,
        "2",
        True,
        common_pb2.PRIORITY_LOW,
    )
    assert counted(metrics, "ferryman_shadow_compared_total", result="same") == 50


def test_differing_and_failing_shadows_are_counted_as_such() -> None:
    assert (
        counted(
            run_shadows(FakeBatchers([2.0, 5.0]), 100, 10), "ferryman_shadow_compared_total", result="differ"
        )
        == 10
    )
    assert (
        counted(run_shadows(FakeBatchers(None), 100, 10), "ferryman_shadow_compared_total", result="failed")
        == 10
    )


def test_shadows_no_capacity_came_for_are_skipped_not_failed() -> None:
    expired = run_shadows(FakeBatchers(None, code=4), 100, 10)  # DEADLINE_EXCEEDED in the queue
    assert counted(expired, "ferryman_shadow_skipped_total") == 10
    assert counted(expired, "ferryman_shadow_compared_total", result="failed") == 0


def test_shadows_past_the_bound_are_skipped_not_queued_and_fallbacks_are_not_mirrored() -> None:
    slow = FakeBatchers([2.0, 4.0], delay_s=1.0)
    metrics = run_shadows(slow, 100, 20, max_inflight=4)
    assert len(slow.items) == 4
    assert counted(metrics, "ferryman_shadow_skipped_total") == 16
    none = FakeBatchers([2.0, 4.0])
    run_shadows(none, 100, 10, fallback=True)
    assert none.items == []
