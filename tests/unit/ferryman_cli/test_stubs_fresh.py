"""The committed stubs (ferryman/v1, ferryman/oip/v2) are exactly what the protos generate,
from protos/ alone: the folder ships every proto it imports."""

from __future__ import annotations

from pathlib import Path

from ferryman_cli.protogen import PACKAGES, REPO_ROOT, generate, stub_files


def test_committed_stubs_match_protos(tmp_path: Path) -> None:
    generate(tmp_path)
    fresh = stub_files(tmp_path)
    committed = stub_files(REPO_ROOT)
    assert {name.rsplit("/", 1)[0] for name in fresh} == set(PACKAGES), "protoc generated nothing"
    assert sorted(fresh) == sorted(committed), "stub file set differs: run `make protos`"
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"stale stubs {stale}: run `make protos`"


def test_every_service_has_stubs() -> None:
    from ferryman.oip.v2 import grpc_predict_v2_pb2_grpc
    from ferryman.v1 import batcher_pb2_grpc, inference_pb2_grpc, node_pb2_grpc, quota_pb2_grpc

    assert hasattr(inference_pb2_grpc, "InferenceStub")
    assert hasattr(quota_pb2_grpc, "QuotaStub")
    assert hasattr(batcher_pb2_grpc, "BatcherStub")
    assert hasattr(node_pb2_grpc, "NodeStub")
    assert hasattr(grpc_predict_v2_pb2_grpc, "GRPCInferenceServiceStub")
