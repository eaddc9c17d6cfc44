"""Scheduling classes by the names people use for them (``low``, ``normal``, ``high``), from
the wire enum itself: the SDK, the console and the CLI read them here."""

from __future__ import annotations

from ferryman.v1 import common_pb2

PREFIX = "PRIORITY_"
PRIORITIES: dict[str, int] = {
    name.removeprefix(PREFIX).lower(): value
    for name, value in common_pb2.Priority.items()
    if value != common_pb2.PRIORITY_UNSPECIFIED
}
"""Every priority but ``UNSPECIFIED`` (which means the tenant's default), lowest first."""
