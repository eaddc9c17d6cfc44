"""What a chart says at a glance: times on a 24-hour clock in a named zone (17:13 was shown
as 05:13), numbers in plain units (3.5 s, not 3.5e+03 ms; 3,840, not 3.84e+03)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ferryman_server.admin_ui.series.charts import plain, time_axis


@pytest.mark.parametrize(
    ("value", "unit", "shown"),
    [
        (3500.0, "ms", "3.5 s"),
        (8.2, "ms", "8.2 ms"),
        (3840.0, "", "3,840"),
        (123456.7, "requests / s", "123,457 requests / s"),
        (999.9, "", "1,000"),
        (0.012, "%", "0.012 %"),
        (0.000012, "", "0.000012"),
        (0.0, "ms", "0 ms"),
    ],
)
def test_numbers_read_plainly(value: float, unit: str, shown: str) -> None:
    assert plain(value, unit) == shown
    assert "e+" not in plain(value, unit) and "e-" not in plain(value, unit)


def test_the_time_axis_is_a_24_hour_clock_in_utc() -> None:
    start, end = datetime(2026, 12, 4, 17, 0, tzinfo=UTC), datetime(2026, 12, 4, 17, 30, tzinfo=UTC)
    spec = time_axis([start, end]).to_dict()
    assert isinstance(spec, dict)
    assert spec["axis"] == {"format": "%H:%M", "formatType": "utc"}
    assert spec["scale"]["type"] == "utc" and spec["title"] == "time (UTC)"
