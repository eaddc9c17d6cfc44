"""A router's Reserves to a quota service of its own go together: those that arrive at once
are one ReserveMany call, answered in order; each caller keeps its own budget, so one with
little time left fails alone, and a call the service refuses fails alone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from ferryman.errors import make_status
from ferryman.v1 import quota_pb2, quota_pb2_grpc
from ferryman_server.kernel.quota import Ask, Decision, QuotaUnavailable, RemoteQuota, ReserveCall

SERVICE_DELAY_S = 0.2


class Recording(quota_pb2_grpc.QuotaServicer):
    """Admits everything but request ids starting with "bad", after a delay; records batches."""

    def __init__(self) -> None:
        self.batches: list[int] = []

    async def ReserveMany(
        self, request: quota_pb2.ReserveManyRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> quota_pb2.ReserveManyResponse:
        self.batches.append(len(request.calls))
        await asyncio.sleep(SERVICE_DELAY_S)
        return quota_pb2.ReserveManyResponse(
            results=[
                quota_pb2.ReserveResult(error=make_status(grpc.StatusCode.INVALID_ARGUMENT, "bad id"))
                if call.request_id.startswith("bad")
                else quota_pb2.ReserveResult(
                    verdict=quota_pb2.ReserveResponse(decision=quota_pb2.QUOTA_DECISION_ADMIT, held=True)
                )
                for call in request.calls
            ]
        )


@pytest.fixture
async def service() -> AsyncIterator[tuple[Recording, RemoteQuota]]:
    recording = Recording()
    server = grpc.aio.server()
    quota_pb2_grpc.add_QuotaServicer_to_server(recording, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    yield recording, RemoteQuota(channel, ())
    await channel.close(None)
    await server.stop(None)


def call(request_id: str) -> ReserveCall:
    return ReserveCall(request_id, "t", "m", Ask(1, 0.0), "fp")


async def test_reserves_that_arrive_together_go_in_one_call_and_fail_alone(
    service: tuple[Recording, RemoteQuota],
) -> None:
    recording, quota = service
    ids = [f"r{i}" for i in range(50)] + ["bad-1"]
    outcomes = await asyncio.gather(*(quota.reserve(call(i), 5.0) for i in ids), return_exceptions=True)
    assert recording.batches == [51]
    assert all(o.decision == Decision.ADMIT and o.held for o in outcomes[:50])  # type: ignore[union-attr]
    assert isinstance(outcomes[50], QuotaUnavailable) and "INVALID_ARGUMENT" in str(outcomes[50])


async def test_a_caller_with_little_time_left_fails_alone(service: tuple[Recording, RemoteQuota]) -> None:
    recording, quota = service
    short = asyncio.ensure_future(quota.reserve(call("short"), SERVICE_DELAY_S / 4))
    others = [quota.reserve(call(f"long{i}"), 5.0) for i in range(5)]
    outcomes = await asyncio.gather(*others)
    assert recording.batches == [6]
    assert all(o.decision == Decision.ADMIT for o in outcomes)
    with pytest.raises(QuotaUnavailable, match="DEADLINE_EXCEEDED"):
        await short
