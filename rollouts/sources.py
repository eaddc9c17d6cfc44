"""Where the rollout controller reads the routers' counters: their /metrics endpoints
(summed), or a Prometheus that scrapes them all (``sum`` over pods, the Kubernetes path,
where the controller cannot list the routers). Both give the same ``Samples``, so the
analysis is one."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Callable

from ferryman_server.kernel.canary import SHADOW_COMPARED
from ferryman_server.kernel.scrape import LATENCY, SCRAPE_TIMEOUT_S, SERVICE, Samples, scrape

MetricsSource = Callable[[], Samples]
"""Reads the routers' metrics, summed (blocking; the controller calls it in a thread)."""

ANALYSED = (
    "ferryman_requests_total",
    f"{LATENCY}_bucket",
    f"{SERVICE}_bucket",
    # The service times' sums and counts: the exact means the latency gate's size is read from.
    f"{SERVICE}_sum",
    f"{SERVICE}_count",
    SHADOW_COMPARED,
)
LABELS = ("model", "version", "code", "le", "result")
"""What the analysis reads of those series; tenants and doors are summed away."""


def router_metrics(urls: list[str]) -> MetricsSource:
    """The source that scrapes these router /metrics URLs."""
    return lambda: scrape(urls)


def prometheus_query() -> str:
    """One instant query for every series the analysis reads, summed over routers."""
    names = "|".join(ANALYSED)
    return f'sum by (__name__, {", ".join(LABELS)}) ({{__name__=~"{names}"}})'


def prometheus(url: str) -> MetricsSource:
    """The source that asks Prometheus at ``url`` (its HTTP API) for the routers' sums."""
    endpoint = f"{url.rstrip('/')}/api/v1/query?" + urllib.parse.urlencode({"query": prometheus_query()})

    def read() -> Samples:
        with urllib.request.urlopen(endpoint, timeout=SCRAPE_TIMEOUT_S) as response:
            body = json.loads(response.read())
        if body.get("status") != "success":
            raise OSError(f"Prometheus answered {body.get('errorType')}: {body.get('error')}")
        samples: Samples = {}
        for series in body["data"]["result"]:
            labels = dict(series["metric"])
            name = labels.pop("__name__")
            samples[(name, tuple(sorted(labels.items())))] = float(series["value"][1])
        return samples

    return read
