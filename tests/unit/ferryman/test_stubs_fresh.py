"""The committed stubs in ferryman/v1 are exactly what the protos generate."""

from __future__ import annotations

from pathlib import Path

from ferryman.protogen import STUB_DIR, generate, stub_files


def test_committed_stubs_match_protos(tmp_path: Path) -> None:
    generate(tmp_path)
    fresh = stub_files(tmp_path / "ferryman" / "v1")
    committed = stub_files(STUB_DIR)
    assert fresh, "protoc generated nothing"
    assert sorted(fresh) == sorted(committed), "stub file set differs: run `make protos`"
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"stale stubs {stale}: run `make protos`"


def test_every_service_has_stubs() -> None:
    from ferryman.v1 import batcher_pb2_grpc, inference_pb2_grpc, node_pb2_grpc, quota_pb2_grpc

    assert hasattr(inference_pb2_grpc, "InferenceStub")
    assert hasattr(quota_pb2_grpc, "QuotaStub")
    assert hasattr(batcher_pb2_grpc, "BatcherStub")
    assert hasattr(node_pb2_grpc, "NodeStub")
