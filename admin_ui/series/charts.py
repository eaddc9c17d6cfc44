"""Charts drawn from the shipped Grafana dashboards' own panels: the same PromQL, titles,
units and legends, so what the console shows is what Grafana shows."""

from __future__ import annotations

import functools
import json
import math
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import altair as alt
import pandas as pd
import streamlit as st

from ferryman_server.admin_ui.series.source import Series, SeriesSource

RANGES: dict[str, float] = {"15 min": 900.0, "1 h": 3600.0, "6 h": 6 * 3600.0, "24 h": 24 * 3600.0}
POINTS = 120
"""Points per series across the chosen range (Grafana draws about as many)."""
CHART_HEIGHT = 220
UNITS: dict[str, tuple[str, float]] = {
    "reqps": ("requests / s", 1.0),
    "ops": ("per second", 1.0),
    "percentunit": ("%", 100.0),
    "percent": ("%", 1.0),
    "s": ("ms", 1000.0),
    "short": ("", 1.0),
    "currencyUSD": ("USD", 1.0),
}
"""Grafana unit -> (axis title, factor from the query's value)."""
TIME_TITLE = "time (UTC)"
TIME_FORMAT = "%H:%M"
SIGNIFICANT = 3
"""Significant digits of a number in a caption."""
MS_PER_S = 1000.0
LEGEND = re.compile(r"\{\{\s*(\w+)\s*\}\}")


@dataclass(frozen=True)
class Panel:
    board: str
    title: str
    unit: str
    targets: tuple[tuple[str, str], ...]
    """(PromQL, Grafana legend format) per query."""


def dashboards_dir() -> Path:
    """The Helm chart's dashboards (in the image: ``FERRYMAN_CONSOLE_DASHBOARDS_DIR``)."""
    from ferryman_server.admin_ui.context import ConsoleSettings

    configured = ConsoleSettings().dashboards_dir
    return (
        Path(configured) if configured else Path(__file__).resolve().parents[2] / "helm/ferryman/dashboards"
    )


@functools.cache
def board(name: str) -> dict[str, Panel]:
    """The panels of dashboard ``ferryman-<name>.json`` by title."""
    raw = json.loads((dashboards_dir() / f"ferryman-{name}.json").read_text())
    return {
        p["title"]: Panel(
            name,
            p["title"],
            p.get("fieldConfig", {}).get("defaults", {}).get("unit", "short"),
            tuple((t["expr"], t.get("legendFormat", "")) for t in p["targets"]),
        )
        for p in raw["panels"]
    }


def panel(name: str, title: str) -> Panel:
    return board(name)[title]


@dataclass(frozen=True)
class Window:
    """A range query's shape: Grafana's ``$__rate_interval`` is at least four scrapes."""

    end: float
    range_s: float
    scrape_s: float

    @property
    def step(self) -> float:
        return max(self.scrape_s, self.range_s / POINTS)

    @property
    def rate_window_s(self) -> float:
        return max(self.step + self.scrape_s, 4 * self.scrape_s)

    @property
    def start(self) -> float:
        return self.end - self.range_s

    @staticmethod
    def ending_now(range_s: float, scrape_s: float) -> Window:
        return Window(time.time(), range_s, scrape_s)


def expression(expr: str, variables: Mapping[str, str], window: Window) -> str:
    """The dashboard's PromQL with its variables filled: a variable left out means all."""
    out = expr.replace("$__rate_interval", f"{round(window.rate_window_s * 1000)}ms")
    for name in sorted(set(re.findall(r"\$(\w+)", out)), key=len, reverse=True):
        value = variables.get(name)
        # Names are a-z, 0-9, '.', '_', '-': only '.' means more in a regex.
        out = out.replace(f"${name}", value.replace(".", "[.]") if value else ".*")
    return out


def legend(fmt: str, labels: Sequence[tuple[str, str]]) -> str:
    values = dict(labels)
    if fmt:
        return LEGEND.sub(lambda m: values.get(m.group(1), ""), fmt).strip()
    return " ".join(v for k, v in labels if k != "__name__") or "value"


def frame(source: SeriesSource, chosen: Panel, window: Window, variables: Mapping[str, str]) -> pd.DataFrame:
    """Long form (time, series, value) in the panel's display unit."""
    _, factor = UNITS.get(chosen.unit, ("", 1.0))
    rows: list[tuple[datetime, str, float]] = []
    for expr, fmt in chosen.targets:
        found: Series = source.query_range(
            expression(expr, variables, window), window.start, window.end, window.step
        )
        for labels, points in found.items():
            name = legend(fmt, labels)
            rows.extend((datetime.fromtimestamp(t, UTC), name, v * factor) for t, v in points)
    return pd.DataFrame(rows, columns=["time", "series", "value"])


@dataclass(frozen=True)
class Mark:
    """A moment worth a vertical line: a route change, a rollout step."""

    at: datetime
    text: str


def time_axis(domain: Sequence[datetime]) -> alt.X:
    """24-hour UTC, said on the axis: a 12-hour clock without am/pm in the browser's own
    zone read 17:13 as 05:13."""
    return alt.X(
        "time:T",
        title=TIME_TITLE,
        scale=alt.Scale(domain=list(domain), type="utc"),
        axis=alt.Axis(format=TIME_FORMAT, formatType="utc"),
    )


def draw(
    chosen: Panel,
    data: pd.DataFrame,
    window: Window,
    marks: Sequence[Mark] = (),
    limits: Mapping[str, float] | None = None,
    key: str = "",
) -> None:
    """One chart: title, unit on the axis, a legend per series, marks and limit lines."""
    axis, factor = UNITS.get(chosen.unit, ("", 1.0))
    domain = [datetime.fromtimestamp(window.start, UTC), datetime.fromtimestamp(window.end, UTC)]
    x = time_axis(domain)
    now = latest(data, axis)
    if data.empty:
        data = pd.DataFrame({"time": domain, "series": ["no data yet"] * 2, "value": [None, None]})
    layers: list[alt.Chart] = [
        alt.Chart(data)
        .mark_line(point=len(data) < 3)
        .encode(
            x=x,
            y=alt.Y("value:Q", title=axis, axis=alt.Axis(format=",.3~r")),
            color=alt.Color("series:N", title=None, legend=alt.Legend(orient="bottom")),
            tooltip=[
                alt.Tooltip("time:T", title=TIME_TITLE, format=f"{TIME_FORMAT}:%S", formatType="utc"),
                "series:N",
                alt.Tooltip("value:Q", format=",.4~r"),
            ],
        )
    ]
    if marks:
        shown = pd.DataFrame([{"time": m.at, "change": m.text} for m in marks if m.at >= domain[0]])
        if not shown.empty:
            layers.append(
                alt.Chart(shown)
                .mark_rule(strokeDash=[4, 3], color="gray")
                .encode(x=x, tooltip=["time:T", "change:N"])
            )
    if limits:
        lines = pd.DataFrame([{"limit": k, "value": v * factor} for k, v in limits.items()])
        layers.append(
            alt.Chart(lines).mark_rule(color="firebrick").encode(y="value:Q", tooltip=["limit:N", "value:Q"])
        )
    chart = alt.layer(*layers).properties(title=chosen.title, height=CHART_HEIGHT)
    st.altair_chart(chart, use_container_width=True, key=key or None)
    st.caption(f"{chosen.title}, latest: {now}")


@dataclass(frozen=True)
class Shown:
    """A dashboard panel to draw, with the limits to draw beside it."""

    board: str
    title: str
    limits: Mapping[str, float] = field(default_factory=dict)


def grid(
    source: SeriesSource,
    shown: Sequence[Shown],
    window: Window,
    variables: Mapping[str, str],
    *,
    key: str,
    columns: int = 2,
    marks: Sequence[Mark] = (),
) -> None:
    """Panels side by side, ``columns`` a row; a source that fails says so under its title."""
    cells = st.columns(columns)
    for i, item in enumerate(shown):
        chosen = panel(item.board, item.title)
        with cells[i % columns]:
            try:
                data = frame(source, chosen, window, variables)
                draw(chosen, data, window, marks, item.limits, key=f"{key}_{i}")
            except OSError as exc:
                st.warning(f"{item.title}: {exc}")


def latest(data: pd.DataFrame, unit: str) -> str:
    """Each series' newest value, as Grafana's legend shows it: what a glance (or a test) reads."""
    if data.empty:
        return "no data yet"
    last = data.sort_values("time").groupby("series")["value"].last()
    return "; ".join(f"{name} {plain(value, unit)}" for name, value in last.items())


def plain(value: float, unit: str) -> str:
    """A number as a person reads it at a glance: three significant digits, no exponent,
    thousands separated, milliseconds past a second in seconds (3.5 s, 3,840, 0.012)."""
    if unit == "ms" and abs(value) >= MS_PER_S:
        value, unit = value / MS_PER_S, "s"
    if not math.isfinite(value) or value == 0:
        return f"{value:g} {unit}".rstrip()
    digits = max(0, SIGNIFICANT - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:,.{digits}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return f"{text} {unit}".rstrip()


def label(range_s: float) -> str:
    return next((name for name, seconds in RANGES.items() if seconds == range_s), f"{range_s:g} s")


def range_picker(key: str) -> float:
    """The time-range picker every chart page shows; seconds."""
    chosen = st.segmented_control("Time range", list(RANGES), default="15 min", key=key) or "15 min"
    return RANGES[chosen]
