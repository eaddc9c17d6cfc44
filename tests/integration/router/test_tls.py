"""TLS on every listener with a CA the test makes: tenants reach the router over TLS with
the SDK; internal services under mutual TLS refuse plaintext, unknown CAs and callers
without a client certificate."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from harness import ServiceThread
from node_helpers import node_settings

import ferryman
from ferryman.v1 import node_pb2, node_pb2_grpc
from ferryman_server.cli.certs import LocalPki, local_pki
from ferryman_server.gpu_node.server import serve_node
from ferryman_server.kernel.config import CommonSettings
from ferryman_server.kernel.security import sync_channel
from ferryman_server.quota.cohost import CoHostedQuota
from ferryman_server.quota.settings import QuotaSettings
from ferryman_server.registry.db import make_engine
from ferryman_server.registry.migrate import upgrade
from ferryman_server.registry.writer import RegistryWriter
from ferryman_server.router.server import serve_router
from ferryman_server.router.settings import RouterSettings


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> LocalPki:
    return local_pki(tmp_path_factory.mktemp("pki"))


def tls_common(root: Path, pki: LocalPki, client_auth: bool) -> CommonSettings:
    return CommonSettings(
        data_dir=root,
        database_url=f"sqlite:///{root / 'registry.db'}",
        tls_cert=str(pki.cert),
        tls_key=str(pki.key),
        tls_ca=str(pki.ca),
        tls_client_auth=client_auth,
    )


@pytest.fixture
def tls_router(tmp_path: Path, pki: LocalPki) -> Iterator[tuple[str, str]]:
    common = tls_common(tmp_path, pki, client_auth=True)
    engine = make_engine(common.resolved_database_url())
    upgrade(engine)
    key = RegistryWriter(engine).create_tenant("secure").plaintext
    settings = RouterSettings(listen="127.0.0.1:0", batchers="127.0.0.1:1")
    thread = ServiceThread(
        lambda stop, ready: serve_router(settings, CoHostedQuota(QuotaSettings()), common, stop, ready)
    )
    address = thread.start()
    yield address, key
    thread.stop()
    engine.dispose()


def test_tenants_reach_the_router_over_tls_only(tls_router: tuple[str, str], pki: LocalPki) -> None:
    address, key = tls_router
    with ferryman.Client(address, key, tls=str(pki.ca), retries=0, timeout=10) as client:
        assert client.list_models() == []  # served over TLS; no client certificate asked of tenants
    with ferryman.Client(address, key, retries=0, timeout=3) as plain, pytest.raises(ferryman.FerrymanError):
        plain.list_models()
    # The system's CAs do not know our CA.
    untrusted = ferryman.Client(address, key, tls=True, retries=0, timeout=3)
    with untrusted, pytest.raises(ferryman.FerrymanError):
        untrusted.list_models()


def test_internal_listeners_demand_mutual_tls(tmp_path: Path, pki: LocalPki) -> None:
    common = tls_common(tmp_path, pki, client_auth=True)
    node = ServiceThread(lambda stop, ready: serve_node(node_settings(), common, stop, ready), "tls-node")
    address = node.start()
    try:
        security = common.security()
        with sync_channel(address, security) as channel:
            info = node_pb2_grpc.NodeStub(channel).NodeInfo(
                node_pb2.NodeInfoRequest(), timeout=10, metadata=security.metadata()
            )
        assert info.name == "test-node"
        no_client_cert = grpc.ssl_channel_credentials(pki.ca.read_bytes())
        attempts = [
            grpc.insecure_channel(address),
            grpc.secure_channel(address, no_client_cert),
        ]
        for channel in attempts:
            with channel, pytest.raises(grpc.RpcError) as refused:
                node_pb2_grpc.NodeStub(channel).NodeInfo(
                    node_pb2.NodeInfoRequest(), timeout=3, metadata=security.metadata()
                )
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        node.stop()
