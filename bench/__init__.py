"""Benchmarks: scripts that measure, never part of the test suite."""
