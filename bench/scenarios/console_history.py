"""The console's own metrics history (no Prometheus): memory and chart time for a day.

Feeds ``ScrapeHistory`` a day of scrapes at the console's interval (``--series`` series: the
request counter and latency histogram of ``--tenants`` tenants, 2 models, 2 versions, 2
codes, 12 buckets each), as the background scraper would, then times the Overview's panels
over 15 min and 24 h with the console's own PromQL evaluation. No services run: what is
measured is the console's storage and evaluator alone (one process, one core).

    python -m bench.scenarios.console_history [--tenants 8] [--interval 5]
"""

from __future__ import annotations

import argparse
import random
import time
import tracemalloc

from ferryman_server.admin_ui.series.charts import RANGES, Window, frame, panel
from ferryman_server.admin_ui.series.history import ScrapeHistory
from ferryman_server.admin_ui.series.promql import Labels
from ferryman_server.admin_ui.series.source import LocalSource
from ferryman_server.admin_ui.views.overview import CHARTS

DAY_S = 86400.0
BUCKETS = ["0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "+Inf"]
MODELS, VERSIONS, CODES = ("mlp", "minilm"), ("1", "2"), ("OK", "RESOURCE_EXHAUSTED")


def day_of_scrapes(history: ScrapeHistory, tenants: int, interval_s: float, start: float) -> int:
    """Counters rising at random rates, one scrape every ``interval_s``; the series count."""
    rng = random.Random(0)
    bases = [
        (("code", c), ("model", m), ("protocol", "grpc"), ("tenant", f"t{t}"), ("version", v))
        for t in range(tenants)
        for m in MODELS
        for v in VERSIONS
        for c in CODES
    ]
    counters: dict[Labels, float] = {}
    keys = {
        base: (
            tuple(sorted((("__name__", "ferryman_requests_total"), *base))),
            [
                tuple(sorted((("__name__", "ferryman_request_latency_seconds_bucket"), ("le", le), *base)))
                for le in BUCKETS
            ],
        )
        for base in bases
    }
    for i in range(int(DAY_S / interval_s)):
        requests: dict[Labels, float] = {}
        buckets: dict[Labels, float] = {}
        for total_key, bucket_keys in keys.values():
            counters[total_key] = counters.get(total_key, 0.0) + rng.randint(0, 20)
            requests[total_key] = counters[total_key]
            for j, key in enumerate(bucket_keys):
                counters[key] = counters.get(key, 0.0) + j
                buckets[key] = counters[key]
        history.add(
            start + i * interval_s,
            {"ferryman_requests_total": requests, "ferryman_request_latency_seconds_bucket": buckets},
        )
    return len(counters)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tenants", type=int, default=8)
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between scrapes")
    args = parser.parse_args()
    start = time.time() - DAY_S
    tracemalloc.start()
    history = ScrapeHistory([], args.interval, DAY_S)
    series = day_of_scrapes(history, args.tenants, args.interval, start)
    memory_mb = tracemalloc.get_traced_memory()[0] / 1e6
    tracemalloc.stop()
    view = history.view()
    print(
        f"{series} series, a day at {args.interval:g} s: {len(view.times)} scrapes kept, {memory_mb:.1f} MB"
    )
    source = LocalSource(history)
    print("| panel | 15 min: first draw | redraw | 24 h: first draw | redraw |\n|---|---|---|---|---|")
    end = start + DAY_S
    timings: dict[str, list[str]] = {shown.title: [] for shown in CHARTS[:4]}
    for name in ("15 min", "24 h"):
        for redraw in (False, True):
            if redraw:  # the next scrape arrives; the chart redraws a scrape later
                history.add(end + args.interval, {})
            at = end + (args.interval if redraw else 0.0)
            for shown in CHARTS[:4]:
                chosen = panel(shown.board, shown.title)
                began = time.perf_counter()
                frame(source, chosen, Window(at, RANGES[name], args.interval), {})
                timings[shown.title].append(f"{(time.perf_counter() - began) * 1000:.0f} ms")
    for title, cells in timings.items():
        print(f"| {title} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
