"""Read a service's /metrics over HTTP for assertions."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

SCRAPE_TIMEOUT_S = 5.0


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample as (name, sorted labels) -> value."""
    with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def sample(url: str, name: str, **labels: str) -> float:
    """One sample's value (0 when absent)."""
    return scrape(url).get((name, tuple(sorted(labels.items()))), 0.0)
