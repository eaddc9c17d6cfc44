"""Each service's /metrics after traffic: only catalog names and labels, and counts that
match what was sent."""

from __future__ import annotations

import uuid

import grpc
import numpy as np
from metrics_scrape import scrape, total
from router_platform import E2E

from ferryman.tensors import encode
from ferryman.v1 import common_pb2, inference_pb2, inference_pb2_grpc
from ferryman_server.gpu_node.demo import echo
from ferryman_server.kernel.metrics_catalog import CATALOG, family
from ferryman_server.kernel.scrape import Samples

REQUESTS = 12


def all_of(urls: list[str]) -> Samples:
    merged: Samples = {}
    for url in urls:
        for key, value in scrape(url).items():
            merged[key] = merged.get(key, 0.0) + value
    return merged


def test_services_export_the_catalog_with_counts_that_match(e2e: E2E) -> None:
    urls = {"router": [e2e.router_metrics], "batcher": [e2e.batcher_metrics], "node": e2e.node_metrics}
    before = {service: all_of(u) for service, u in urls.items()}
    stub = inference_pb2_grpc.InferenceStub(grpc.insecure_channel(e2e.router))
    case = uuid.uuid4().hex
    for i in range(REQUESTS):
        stub.Predict(
            inference_pb2.PredictRequest(
                model="echo",
                parameters={"case": case},
                inputs=[
                    common_pb2.NamedTensor(
                        name="input", tensor=encode(np.full((1, echo.WIDTH), i, np.float32))
                    )
                ],
            ),
            metadata=(("authorization", f"Bearer {e2e.keys['acme']}"),),
            timeout=30,
        )
    after = {service: all_of(u) for service, u in urls.items()}
    for samples in after.values():
        for name, labels in samples:
            metric = family(name)
            if name.startswith("ferryman_"):
                assert metric is not None, f"{name} is not in the catalog"
                expected = set(CATALOG[metric][1]) | ({"le"} if name.endswith("_bucket") else set())
                assert {k for k, _ in labels} == expected, (name, labels)

    def delta(service: str, name: str, **labels: str) -> float:
        return total(after[service], name, **labels) - total(before[service], name, **labels)

    ok = delta("router", "ferryman_requests_total", tenant="acme", model="echo", version="1", code="OK")
    assert ok == REQUESTS
    assert delta("router", "ferryman_request_latency_seconds_count", tenant="acme", model="echo") == REQUESTS
    assert delta("router", "ferryman_quota_decisions_total", tenant="acme", decision="admit") == REQUESTS
    batches = delta("batcher", "ferryman_batch_fill_ratio_count", model="echo", version="1")
    assert batches >= 1
    assert delta("batcher", "ferryman_batch_size_count", model="echo", version="1") == batches
    assert delta("batcher", "ferryman_batch_size_sum", model="echo", version="1") == REQUESTS
    assert delta("node", "ferryman_node_batches_total", model="echo", version="1") == batches
    assert total(after["node"], "ferryman_node_up") == len(e2e.node_metrics)
