"""Internal APIs are not tenant APIs: the public port serves and lists only Inference;
Quota, Batcher and Node refuse callers without the service token; a port in use is not
silently shared."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import grpc
import pytest
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from internal import internal_channel
from router_platform import E2E

from ferryman.v1 import batcher_pb2, batcher_pb2_grpc, node_pb2, node_pb2_grpc, quota_pb2, quota_pb2_grpc
from ferryman_server.batcher.server import BATCHER_SERVICE
from ferryman_server.kernel.net import free_port
from ferryman_server.quota.cohost import CoHostedQuota
from ferryman_server.quota.settings import QuotaSettings
from ferryman_server.registry.db import make_engine
from ferryman_server.registry.reader import RegistryReader
from ferryman_server.router.server import INFERENCE, QUOTA, serve_router
from ferryman_server.router.settings import RouterSettings

HEALTH = "grpc.health.v1.Health"


def listed_services(address: str) -> set[str]:
    with grpc.insecure_channel(address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        response = next(stub.ServerReflectionInfo(iter([request]), timeout=5))
    return {s.name for s in response.list_services_response.service}


def test_public_port_serves_and_lists_no_quota(e2e: E2E) -> None:
    assert QUOTA not in listed_services(e2e.router)
    assert INFERENCE in listed_services(e2e.router)
    with grpc.insecure_channel(e2e.router) as channel:
        stub = quota_pb2_grpc.QuotaStub(channel)
        with pytest.raises(grpc.RpcError) as refused:
            stub.Reserve(
                quota_pb2.ReserveRequest(request_id="x", tenant="acme", estimated_cost_usd=999.9), timeout=5
            )
        assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED
        with pytest.raises(grpc.RpcError) as usage:
            stub.GetUsage(quota_pb2.GetUsageRequest(tenant="acme"), timeout=5)
        assert usage.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_internal_quota_port_demands_the_service_token(e2e: E2E) -> None:
    internal = f"127.0.0.1:{free_port()}"
    e2e.start_router(QuotaSettings(), internal_listen=internal)
    assert listed_services(internal) == {
        QUOTA,
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
    }
    attacks: list[Callable[[quota_pb2_grpc.QuotaStub], object]] = [
        lambda stub: stub.GetUsage(quota_pb2.GetUsageRequest(tenant="acme"), timeout=5),
        lambda stub: stub.Reserve(
            quota_pb2.ReserveRequest(request_id="a", tenant="metered", estimated_cost_usd=999.9), timeout=5
        ),
        lambda stub: stub.Commit(quota_pb2.CommitRequest(request_id="a", actual_cost_usd=-1.0), timeout=5),
    ]
    with grpc.insecure_channel(internal) as channel:
        stub = quota_pb2_grpc.QuotaStub(channel)
        for attack in attacks:
            with pytest.raises(grpc.RpcError) as refused:
                attack(stub)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        wrong = (("x-ferryman-service-token", "guess"),)
        with pytest.raises(grpc.RpcError) as guessed:
            stub.GetUsage(quota_pb2.GetUsageRequest(tenant="acme"), timeout=5, metadata=wrong)
        assert guessed.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with internal_channel(internal) as channel:
        usage = quota_pb2_grpc.QuotaStub(channel).GetUsage(
            quota_pb2.GetUsageRequest(tenant="metered"), timeout=5
        )
        assert [limit.limit for limit in usage.limits] == ["metered:rpm"]


def test_batcher_and_node_refuse_callers_without_the_token(e2e: E2E) -> None:
    assert BATCHER_SERVICE in listed_services(e2e.batcher)  # tooling may list; only calls are guarded
    item = batcher_pb2.SubmitItem(request_id="t/1", tenant="acme", model="echo", version="1")
    with grpc.insecure_channel(e2e.batcher) as channel:
        responses = batcher_pb2_grpc.BatcherStub(channel).Submit(
            iter([batcher_pb2.SubmitRequest(items=[item])]), timeout=5
        )
        with pytest.raises(grpc.RpcError) as refused:
            list(responses)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    node = RegistryReader(make_engine(e2e.registry_url)).nodes()[0]
    with grpc.insecure_channel(node.address) as channel:
        stub = node_pb2_grpc.NodeStub(channel)
        with pytest.raises(grpc.RpcError) as unload:
            stub.UnloadModel(node_pb2.UnloadModelRequest(model="echo", version="1"), timeout=5)
        assert unload.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with internal_channel(node.address) as channel:
        info = node_pb2_grpc.NodeStub(channel).NodeInfo(node_pb2.NodeInfoRequest(), timeout=5)
    assert "echo" in {v.model for v in info.versions}  # nothing was unloaded


async def test_a_second_router_cannot_bind_a_port_in_use(e2e: E2E) -> None:
    port = int(e2e.router.rsplit(":", 1)[1])
    settings = RouterSettings(listen=f"127.0.0.1:{port}", batchers=e2e.batcher)
    with pytest.raises(OSError, match="in use"):
        await asyncio.wait_for(
            serve_router(settings, CoHostedQuota(QuotaSettings()), e2e.common, asyncio.Event()), 30
        )
