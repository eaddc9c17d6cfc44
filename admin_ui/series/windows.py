"""A selector's series at many instants at once (numpy).

A range query asks for an expression at hundreds of instants, and a Latency panel reads
thousands of bucket series: looping over each series' window at each instant in Python
cost seconds per chart on a day of history. Here the series of one selector, which share
the history's time axis, are a matrix (series x scrapes, NaN where a scrape lacked one),
and every instant's window is located once and read for all series by index arithmetic.
A window is ``(start, end]``: the samples after its start, up to and at its end, as in
Prometheus.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float64]
Indices = npt.NDArray[np.intp]
Mask = npt.NDArray[np.bool_]
EXTRAPOLATION_THRESHOLD = 1.1
"""A window's edge further than this many average sample gaps from its nearest sample is
extrapolated by half a gap only (Prometheus' extrapolatedRate)."""
ROWS_PER_BLOCK = 256
"""Series evaluated together: bounds the temporary matrices to a few MB each."""


def blocks(columns: Sequence[Sequence[float]], lo: int, hi: int) -> list[Floats]:
    """The columns' scrapes ``lo:hi`` as matrices of at most ROWS_PER_BLOCK rows. Each
    column is sliced (copied) first: the scraper appends to them while a chart reads."""
    return [
        np.array([column[lo:hi] for column in columns[i : i + ROWS_PER_BLOCK]], dtype=np.float64)
        for i in range(0, len(columns), ROWS_PER_BLOCK)
    ]


class Samples:
    """Where each row's samples are, by scrape: the one before or at, the one at or after."""

    def __init__(self, values: Floats) -> None:
        rows, width = values.shape
        present = ~np.isnan(values)
        index = np.arange(width)
        # Column 0 stands for "before the first scrape", so an empty window reads -1.
        self.at_or_before = np.full((rows, width + 1), -1, dtype=np.intp)
        self.at_or_before[:, 1:] = np.maximum.accumulate(np.where(present, index, -1), axis=1)
        self.at_or_after = np.full((rows, width + 1), width, dtype=np.intp)
        self.at_or_after[:, :width] = np.minimum.accumulate(np.where(present, index, width)[:, ::-1], axis=1)[
            :, ::-1
        ]
        self.count = np.zeros((rows, width + 1), dtype=np.intp)
        self.count[:, 1:] = np.cumsum(present, axis=1)

    def window(self, times: Floats, starts: Floats, ends: Floats) -> tuple[Indices, Indices, Indices]:
        """Each row's first and last sample in each window (rows x instants; -1 or width
        where none) and how many samples the window holds."""
        lo = np.searchsorted(times, starts, side="right")
        hi = np.searchsorted(times, ends, side="right")
        return self.at_or_after[:, lo], self.at_or_before[:, hi], self.count[:, hi] - self.count[:, lo]


def latest(times: Floats, values: Floats, instants: Floats, lookback_s: float) -> tuple[Mask, Floats]:
    """An instant selector: each row's newest sample within ``lookback_s`` before each
    instant. Returns (rows x instants: whether it has one, its value)."""
    _, last, count = Samples(values).window(times, instants - lookback_s, instants)
    has = count > 0
    rows = np.arange(values.shape[0])[:, None]
    return has, np.where(has, values[rows, np.maximum(last, 0)], np.nan)


def extrapolated(
    times: Floats, values: Floats, instants: Floats, range_s: float, per_second: bool
) -> tuple[Mask, Floats]:
    """``rate`` (``per_second``) or ``increase`` of each row, a counter, over ``range_s``
    before each instant, as Prometheus' extrapolatedRate: counter resets added back, the
    edges extrapolated. Returns (rows x instants: two samples or more, the value)."""
    found = Samples(values)
    starts = instants - range_s
    first, last, count = found.window(times, starts, instants)
    has = count >= 2
    first, last = np.where(has, first, 0), np.where(has, last, 0)
    rows = np.arange(values.shape[0])[:, None]
    # What each reset lost (the sample before it), summed along the row: a sample is a
    # reset when below the row's previous sample, however many scrapes lacked it between.
    previous = found.at_or_before[:, :-1]  # at scrape j: the row's last sample before j
    before = np.where(previous >= 0, values[rows, np.maximum(previous, 0)], np.nan)
    lost = np.cumsum(np.where(values < before, before, 0.0), axis=1)
    first_t, first_v, last_t = times[first], values[rows, first], times[last]
    delta = (values[rows, last] - first_v) + (lost[rows, last] - lost[rows, first])
    sampled = last_t - first_t
    with np.errstate(divide="ignore", invalid="ignore"):
        average = sampled / (count - 1)
        to_start = first_t - starts
        to_start = np.where(to_start >= average * EXTRAPOLATION_THRESHOLD, average / 2, to_start)
        # A counter extrapolated back no further than where it would have been zero.
        to_zero = sampled * (first_v / delta)
        to_start = np.where((delta > 0) & (first_v >= 0), np.minimum(to_start, to_zero), to_start)
        to_end = instants - last_t
        to_end = np.where(to_end >= average * EXTRAPOLATION_THRESHOLD, average / 2, to_end)
        result = delta * ((sampled + to_start + to_end) / sampled)
        if per_second:
            result = result / (instants - starts)
    return has, np.where(has, result, np.nan)
