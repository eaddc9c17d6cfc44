"""Read a service's /metrics over HTTP for assertions (the same parser ``ferryman top`` uses)."""

from __future__ import annotations

from ferryman_server.kernel.scrape import Samples
from ferryman_server.kernel.scrape import scrape as scrape_all


def scrape(url: str) -> Samples:
    """Every sample as (name, sorted labels) -> value."""
    return scrape_all([url])


def sample(url: str, name: str, **labels: str) -> float:
    """One sample's value (0 when absent)."""
    return scrape(url).get((name, tuple(sorted(labels.items()))), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of ``name`` over every series in ``samples`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, have), v in samples.items() if n == name and want <= set(have))
