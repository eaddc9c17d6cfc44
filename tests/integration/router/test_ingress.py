"""The topology the chart installs, behind an ingress: nginx (Debian's) spreads the HTTP doors'
requests over both routers, a model answers through it as it does directly, and one tenant's
quota holds across both routers (its counters on the Redis they share)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

import pytest
from batcher_platform import REGISTRY_REFRESH_S
from metrics_scrape import scrape, total
from router_platform import wait_known
from topology import Topology

from ferryman_server.gpu_node.demo import echo
from ferryman_server.registry.specs import QuotaLimits

# Left out of make test-fast: the platform as processes.
pytestmark = pytest.mark.slow

TIMEOUT_S = 30
REQUESTS = 12
RPM = 6


def echo_body(value: float) -> bytes:
    row = [value] * echo.WIDTH
    return json.dumps(
        {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, echo.WIDTH], "data": row}]}
    ).encode()


def infer(base: str, key: str, value: float) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        f"{base}/v2/models/echo/infer", data=echo_body(value), headers={"Authorization": f"Bearer {key}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def answered(topology: Topology) -> float:
    """Requests the routers answered, all of them together."""
    return sum(total(scrape(url), "ferryman_requests_total") for url in topology.router_metrics)


def test_a_model_answers_through_the_ingress_as_it_does_directly(topology: Topology) -> None:
    key = topology.e2e.keys["acme"]
    direct = infer(topology.e2e.http, key, 3.0)
    through = infer(topology.ingress, key, 3.0)
    assert direct[0] == through[0] == 200
    assert direct[1]["outputs"] == through[1]["outputs"]


def test_the_ingress_spreads_requests_over_both_routers(topology: Topology) -> None:
    before = [total(scrape(url), "ferryman_requests_total") for url in topology.router_metrics]
    for i in range(REQUESTS):
        assert infer(topology.ingress, topology.e2e.keys["acme"], float(i))[0] == 200
    after = [total(scrape(url), "ferryman_requests_total") for url in topology.router_metrics]
    gained = [b - a for a, b in zip(before, after, strict=True)]
    assert sum(gained) >= REQUESTS and all(g > 0 for g in gained), gained


def test_one_quota_holds_across_both_routers(topology: Topology) -> None:
    """A tenant allowed RPM requests a minute sends twice as many through the ingress, which
    alternates routers: exactly RPM are answered, as with one router."""
    name = f"ingress-{uuid.uuid4().hex[:6]}"
    key = topology.e2e.writer.create_tenant(name).plaintext
    topology.e2e.writer.set_quota(name, QuotaLimits(rpm=RPM))
    wait_known(topology.routers, key)
    time.sleep(REGISTRY_REFRESH_S * 3)  # the quota policy: a later write, a later refresh
    before = answered(topology)
    codes = [infer(topology.ingress, key, float(i))[0] for i in range(REQUESTS)]
    assert codes.count(200) == RPM and codes.count(429) == REQUESTS - RPM, codes
    assert answered(topology) - before >= REQUESTS  # both routers took part (round robin)
