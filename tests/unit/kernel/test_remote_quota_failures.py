"""A settle the quota service does not answer is not applied (its lease settles it later),
and says so in the log: once per kind of call a period, however many fail."""

from __future__ import annotations

import logging

import grpc
import pytest

from ferryman_server.kernel.net import free_port
from ferryman_server.kernel.quota import RemoteQuota

BUDGET_S = 0.5


async def test_failed_settles_are_logged_rate_limited(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="ferryman.quota.client")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{free_port()}") as channel:  # nobody listens
        quota = RemoteQuota(channel, ())
        assert not await quota.commit("r1", 10, 0.0, BUDGET_S)
        assert not await quota.commit("r2", 10, 0.0, BUDGET_S)
        assert not await quota.release("r3", BUDGET_S)
        assert await quota.renew(["r4"], BUDGET_S) == 0
    lines = [r.getMessage() for r in caplog.records if r.name == "ferryman.quota.client"]
    assert [line.split()[1] for line in lines] == ["commit", "release", "renew"]
    assert all("UNAVAILABLE" in line or "DEADLINE_EXCEEDED" in line for line in lines)
