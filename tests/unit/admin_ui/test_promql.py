"""The console's PromQL subset over its own scrapes: pure, hand-computed figures."""

from __future__ import annotations

import itertools
import math

import pytest

from ferryman_server.admin_ui.series.charts import RANGES, Window, board, expression
from ferryman_server.admin_ui.series.history import (
    COARSE_STEP_S,
    FULL_RESOLUTION_S,
    MAX_SCRAPES,
    ScrapeHistory,
)
from ferryman_server.admin_ui.series.promql import Labels, PromQLError, Scrape, evaluate, parse
from ferryman_server.admin_ui.series.source import LocalSource
from ferryman_server.admin_ui.series.windows import ROWS_PER_BLOCK

STEP_S = 5.0


def series(name: str, **labels: str) -> Labels:
    return tuple(sorted({"__name__": name, **labels}.items()))


def scrape(at: float, values: dict[Labels, float]) -> Scrape:
    """As the history keeps it: by metric name."""
    metrics: dict[str, dict[Labels, float]] = {}
    for labels, value in values.items():
        metrics.setdefault(dict(labels)["__name__"], {})[labels] = value
    return at, metrics


def requests(count: int) -> list[Scrape]:
    """Scrapes every 5 s: model a at 2 req/s (1 in 10 errors), model b at 1 req/s."""
    out: list[Scrape] = []
    for i in range(count):
        t = 1000.0 + i * STEP_S
        out.append(
            scrape(
                t,
                {
                    series("ferryman_requests_total", model="a", version="1", code="OK"): 9.0 * i,
                    series("ferryman_requests_total", model="a", version="2", code="INTERNAL"): 1.0 * i,
                    series("ferryman_requests_total", model="b", version="1", code="OK"): 5.0 * i,
                    series("ferryman_node_up"): 1.0,
                },
            )
        )
    return out


def at_end(expr: str, scrapes: list[Scrape]) -> dict[Labels, float]:
    return {k: v[-1][1] for k, v in evaluate(expr, scrapes, [scrapes[-1][0]]).items()}


def test_rate_by_label_is_the_counters_slope() -> None:
    got = at_end("sum by (model) (rate(ferryman_requests_total[20s]))", requests(10))
    assert got == {(("model", "a"),): pytest.approx(2.0), (("model", "b"),): pytest.approx(1.0)}


def test_error_share_and_traffic_share_match_on_labels() -> None:
    scrapes = requests(10)
    errors = at_end(
        'sum by (model) (rate(ferryman_requests_total{code!~"OK|RESOURCE_EXHAUSTED"}[20s]))'
        " / sum by (model) (rate(ferryman_requests_total[20s]))",
        scrapes,
    )
    assert errors == {(("model", "a"),): pytest.approx(0.1)}  # b has no errors: no series, as in Prometheus
    share = at_end(
        'sum by (version) (rate(ferryman_requests_total{model=~"a"}[20s]))'
        ' / ignoring(version) group_left sum(rate(ferryman_requests_total{model=~"a"}[20s]))',
        scrapes,
    )
    assert share == {(("version", "1"),): pytest.approx(0.9), (("version", "2"),): pytest.approx(0.1)}
    assert at_end("sum(ferryman_node_up) * 60", scrapes) == {(): 60.0}


def test_a_counter_reset_is_not_a_negative_rate() -> None:
    name = series("ferryman_requests_total", model="a")
    scrapes = [scrape(1000.0 + i * STEP_S, {name: v}) for i, v in enumerate([10.0, 20.0, 30.0, 5.0, 15.0])]
    got = at_end("sum(rate(ferryman_requests_total[20s]))", scrapes)
    # In (1000, 1020]: 20 -> 30, then 0 -> 5 after the restart, then 5 -> 15: 25 over 15 s,
    # extrapolated to the 20 s window as Prometheus does.
    assert got[()] == pytest.approx(25 / 15)


def test_a_reset_across_a_missed_scrape_counts_from_the_last_sample_before_it() -> None:
    name = series("c")
    values = [10.0, 20.0, None, 5.0, 15.0]  # the scrape at 1010 lacked the series
    scrapes = [scrape(1000.0 + i * STEP_S, {} if v is None else {name: v}) for i, v in enumerate(values)]
    # In (1000, 1020]: 20 at 1005, 5 at 1015 (a reset: 20 lost), 15 at 1020: 15 over 15 s,
    # the start extrapolated by 5 s (under 1.1 average gaps of 7.5 s): 15 * 20 / 15.
    assert at_end("increase(c[20s])", scrapes) == {(): pytest.approx(20.0)}
    assert at_end("rate(c[20s])", scrapes) == {(): pytest.approx(1.0)}


def test_many_series_at_many_instants_equal_each_instant_alone() -> None:
    # More series than one block of the matrix evaluation, each with its own slope.
    names = [series("c", i=str(i)) for i in range(2 * ROWS_PER_BLOCK + 3)]

    def present(i: int, k: int) -> bool:  # gaps in every series, none in the last 50 s
        return k >= 30 or (i + k) % 7 != 0

    scrapes = [
        scrape(1000.0 + k * STEP_S, {n: (i + 1) * k * STEP_S for i, n in enumerate(names) if present(i, k)})
        for k in range(40)
    ]
    times = [1000.0 + k * 3.0 for k in range(70)]
    for expr in ("rate(c[20s])", "c", "sum(rate(c[1m]))"):
        together = evaluate(expr, scrapes, times)
        alone: dict[Labels, list[tuple[float, float]]] = {}
        for t in times:
            for labels, points in evaluate(expr, scrapes, [t]).items():
                alone.setdefault(labels, []).extend(points)
        assert together == alone, expr
    last = at_end("rate(c[20s])", scrapes)
    assert len(last) == len(names)
    assert all(v == pytest.approx(float(dict(k)["i"]) + 1) for k, v in last.items())


def test_histogram_quantile_over_rates() -> None:
    scrapes: list[Scrape] = []
    for i in range(6):  # per 5 s: 8 requests under 10 ms, 2 between 10 and 100 ms
        scrapes.append(
            scrape(
                1000.0 + i * STEP_S,
                {
                    series("lat_bucket", le="0.01"): 8.0 * i,
                    series("lat_bucket", le="0.1"): 10.0 * i,
                    series("lat_bucket", le="+Inf"): 10.0 * i,
                },
            )
        )
    got = at_end("histogram_quantile(0.5, sum by (le) (rate(lat_bucket[20s])))", scrapes)
    assert got[()] == pytest.approx(0.01 * 0.5 / 0.8)
    p99 = at_end("histogram_quantile(0.99, sum by (le) (rate(lat_bucket[20s])))", scrapes)[()]
    assert p99 == pytest.approx(0.01 + 0.09 * (0.99 - 0.8) / 0.2)


def test_too_few_points_give_no_value_and_gaps_stay_gaps() -> None:
    assert evaluate("sum(rate(ferryman_requests_total[20s]))", requests(1), [1000.0]) == {}
    assert evaluate("1 / 0 - 1 / 0", [], [0.0]) == {}  # NaN is a gap, never a point
    assert evaluate("1 / 0", [], [0.0]) == {(): [(0.0, math.inf)]}


@pytest.mark.parametrize(
    "bad", ["foo(", "label_replace(x, 'a', 'b', 'c', 'd')", 'x{a~"b"}', "rate(x)", "x y"]
)
def test_what_is_outside_the_subset_is_refused(bad: str) -> None:
    with pytest.raises(PromQLError):
        evaluate(bad, requests(3), [1010.0])


def test_every_panel_of_every_shipped_dashboard_is_in_the_subset() -> None:
    window = Window(end=2000.0, range_s=RANGES["1 h"], scrape_s=STEP_S)
    for name in ("overview", "batching", "tenants", "canary"):
        for chosen in board(name).values():
            for expr, _ in chosen.targets:
                parse(expression(expr, {"model": "mini.lm"}, window))
    filled = expression(
        'rate(x{model=~"$model",tenant=~"$tenant"}[$__rate_interval])', {"model": "a.b"}, window
    )
    assert (
        filled == 'rate(x{model=~"a[.]b",tenant=~".*"}[35000ms])'
    )  # Grafana's $__rate_interval: 30 s step + one scrape


def test_a_days_history_stays_bounded_and_keeps_the_last_hour_whole() -> None:
    day, interval = 86400.0, 5.0
    history = ScrapeHistory([], interval_s=interval, reach_s=day)
    count = int(2 * day / interval)
    for i in range(count):
        history.add(i * interval, {"x": {series("x"): float(i)}})
    view = history.view()
    now = (count - 1) * interval
    assert len(view.times) <= MAX_SCRAPES
    recent = [t for t in view.times if t >= now - FULL_RESOLUTION_S]
    assert len(recent) == FULL_RESOLUTION_S / interval + 1  # every scrape of the last hour
    older = [t for t in view.times if t < now - FULL_RESOLUTION_S]
    # Thinned to a minute apart when last rebuilt (what came since waits for the next one).
    assert sum(1 for a, b in itertools.pairwise(older) if b - a >= COARSE_STEP_S) > day / COARSE_STEP_S / 2
    assert now - day - FULL_RESOLUTION_S <= older[0] <= now - day + COARSE_STEP_S
    (column,) = view.metrics["x"].values()
    assert [column[i] for i in (0, -1)] == [view.times[0] / interval, float(count - 1)]
    rate = evaluate("sum(rate(x[10m]))", view, [now - day / 2])[()][0][1]
    assert rate == pytest.approx(1 / interval)  # thinned, the counter's slope is still there


def test_a_series_that_comes_late_or_goes_is_a_gap_not_a_zero() -> None:
    history = ScrapeHistory([], interval_s=1.0, reach_s=3600.0)
    for i in range(10):
        found = {"y": {series("y", n="late"): float(i)}} if i >= 5 else {}
        if i < 3:
            found["y"] = {**found.get("y", {}), series("y", n="gone"): 1.0}
        history.add(float(i), found)
    columns = history.view().metrics["y"]
    assert math.isnan(columns[series("y", n="late")][4]) and columns[series("y", n="late")][5] == 5.0
    assert math.isnan(columns[series("y", n="gone")][3])
    got = evaluate("y", history.view(), [9.0])
    assert set(got) == {(("__name__", "y"), ("n", "late")), (("__name__", "y"), ("n", "gone"))}


def test_a_redraw_reuses_settled_instants_and_recomputes_only_new_ones() -> None:
    history = ScrapeHistory([], interval_s=STEP_S, reach_s=3600.0)
    for t, found in requests(40):
        history.add(t, found)
    source = LocalSource(history)
    expr = "sum by (model) (rate(ferryman_requests_total[20s]))"
    end = 1000.0 + 39 * STEP_S
    first = source.query_range(expr, end - 100, end, 10.0)
    assert first == evaluate(expr, history.view(), [t for t, _ in first[(("model", "a"),)]])
    for t, found in requests(45)[40:]:  # five more scrapes, model a now at 4 req/s
        found["ferryman_requests_total"] = {k: v * 2 for k, v in found["ferryman_requests_total"].items()}
        history.add(t, found)
    again = source.query_range(expr, end - 80, end + 20, 10.0)
    fresh = evaluate(expr, history.view(), [t for t, _ in again[(("model", "a"),)]])
    assert again == fresh  # the cache never serves a stale instant
    assert again[(("model", "a"),)][-1][1] > 2.0  # the newest instant saw the new scrapes
