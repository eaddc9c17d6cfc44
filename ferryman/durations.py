"""Protobuf Durations and Timestamps as seconds: the one way every part of Ferryman reads
and writes them (floats of seconds, as the settings and clocks are)."""

from __future__ import annotations

from google.protobuf import duration_pb2, timestamp_pb2

NS_PER_S = 1_000_000_000


def seconds_of(value: duration_pb2.Duration | timestamp_pb2.Timestamp) -> float:
    """A Duration's length, or a Timestamp's time since the epoch, in seconds."""
    return value.seconds + value.nanos / NS_PER_S


def set_seconds(value: duration_pb2.Duration | timestamp_pb2.Timestamp, seconds: float) -> None:
    """Set a Duration (or a Timestamp, as seconds since the epoch) to ``seconds``."""
    value.FromNanoseconds(round(seconds * NS_PER_S))
