"""Read a service's /metrics over HTTP for assertions (the same parser ``ferryman top`` uses)."""

from __future__ import annotations

import re
import urllib.request

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


OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"
EXEMPLAR = re.compile(r"^(\w+)\{[^}]*\} \S+ # \{([^}]*)\}")


def exemplars(url: str) -> dict[str, set[str]]:
    """Trace ids of the exemplars each metric family carries, scraped as OpenMetrics (the
    format Prometheus asks for when exemplar storage is on)."""
    request = urllib.request.Request(url, headers={"Accept": OPENMETRICS})
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.headers["Content-Type"].startswith("application/openmetrics-text")
        text = answer.read().decode()
    found: dict[str, set[str]] = {}
    for line in text.splitlines():
        if match := EXEMPLAR.match(line):
            labels = dict(part.split("=", 1) for part in match.group(2).split(","))
            found.setdefault(match.group(1), set()).add(labels["trace_id"].strip('"'))
    return found
