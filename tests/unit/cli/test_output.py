"""Costs print as plain decimals, however the float of dollars came out."""

from __future__ import annotations

from ferryman_server.cli.output import usd


def test_costs_are_plain_decimals() -> None:
    assert usd(6.000000000000001e-07) == "0.0000006"
    assert usd(0.0) == "0"
    assert usd(1.5) == "1.5"
    assert usd(3 * 0.1) == "0.3"
    assert "e" not in usd(1e-9)
