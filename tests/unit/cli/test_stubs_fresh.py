"""The committed stubs (ferryman/v1, ferryman/oip/v2) are exactly what the protos generate,
from protos/ alone: the folder ships every proto it imports."""

from __future__ import annotations

from pathlib import Path

from ferryman_server.cli.protogen import PACKAGES, REPO_ROOT, generate, stub_files


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


def test_the_sdk_floors_are_the_generators_versions() -> None:
    """Stubs refuse a runtime older than their generator: the SDK may not declare one."""
    import tomllib

    from ferryman_server.cli.protogen import GENERATOR_REQUIREMENTS

    pinned = dict(
        line.split("==")
        for line in GENERATOR_REQUIREMENTS.read_text().splitlines()
        if line and not line.startswith("#")
    )
    declared = tomllib.loads((REPO_ROOT / "sdk" / "pyproject.toml").read_text())["project"]["dependencies"]
    floors = {d.split(">=")[0]: d.split(">=")[1].split(",")[0] for d in declared if ">=" in d}
    assert floors["protobuf"] == pinned["protobuf"]
    assert floors["grpcio"] == floors["grpcio-status"] == pinned["grpcio-tools"]
    stub = (REPO_ROOT / "ferryman" / "v1" / "inference_pb2.py").read_text()
    major, minor, patch = pinned["protobuf"].split(".")
    assert f"_runtime_version.Domain.PUBLIC,\n    {major},\n    {minor},\n    {patch}," in stub
