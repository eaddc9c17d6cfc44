"""The node over real gRPC: every format, correct outputs, per-item failures, health."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
import torch
from grpc_health.v1 import health_pb2, health_pb2_grpc
from node_helpers import POISON, Artifacts, spec

from ferryman.errors import unpack_details
from ferryman.tensors import decode, encode
from ferryman.v1 import common_pb2, node_pb2, node_pb2_grpc
from ferryman_server.gpu_node.demo import echo, mlp

RNG = np.random.default_rng(7)


def tensor_item(request_id: str, array: np.ndarray, name: str = "input") -> node_pb2.BatchItem:
    return node_pb2.BatchItem(
        request_id=request_id, inputs=[common_pb2.NamedTensor(name=name, tensor=encode(array))]
    )


def text_item(request_id: str, texts: list[str]) -> node_pb2.BatchItem:
    return node_pb2.BatchItem(
        request_id=request_id,
        inputs=[common_pb2.NamedTensor(name="text", text=common_pb2.TextList(values=texts))],
    )


def infer(
    stub: node_pb2_grpc.NodeStub, model: str, version: str, items: list[node_pb2.BatchItem]
) -> node_pb2.InferBatchResponse:
    request = node_pb2.InferBatchRequest(model=model, version=version, items=items)
    response: node_pb2.InferBatchResponse = stub.InferBatch(request, timeout=60)
    return response


def health(address: str, service: str) -> int:
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return int(stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status)


@pytest.mark.parametrize("model", ["mlp", "mlp-ts"])
@pytest.mark.parametrize("batch", [1, 2, 7, 32, 128])
def test_batches_match_the_model_run_directly(
    node: node_pb2_grpc.NodeStub, artifacts: Artifacts, model: str, batch: int
) -> None:
    inputs = [RNG.standard_normal((1, 512), dtype=np.float32) for _ in range(batch)]
    response = infer(node, model, "1", [tensor_item(f"r{i}", x) for i, x in enumerate(inputs)])
    assert response.batch_size == batch
    assert response.compute.ToNanoseconds() > 0
    direct = torch.export.load(str(artifacts.mlp_export)).module()
    with torch.inference_mode():
        expected = direct(torch.from_numpy(np.concatenate(inputs))).numpy()
    for i, outcome in enumerate(response.items):
        assert outcome.request_id == f"r{i}" and outcome.status.code == 0, outcome.status.message
        got = decode(outcome.outputs[0].tensor)
        assert got.shape == (1, 10)
        np.testing.assert_allclose(got[0], expected[i], rtol=1e-4, atol=1e-5)
        assert outcome.usage.items == 1


def test_items_with_several_rows_are_split_back(node: node_pb2_grpc.NodeStub) -> None:
    a = RNG.standard_normal((3, 512), dtype=np.float32)
    b = RNG.standard_normal((5, 512), dtype=np.float32)
    response = infer(node, "mlp", "1", [tensor_item("a", a), tensor_item("b", b)])
    expected = mlp.build_mlp()(torch.from_numpy(np.concatenate([a, b]))).detach().numpy()
    assert response.batch_size == 8
    np.testing.assert_allclose(
        decode(response.items[0].outputs[0].tensor), expected[:3], rtol=1e-4, atol=1e-5
    )
    np.testing.assert_allclose(
        decode(response.items[1].outputs[0].tensor), expected[3:], rtol=1e-4, atol=1e-5
    )
    assert [o.usage.items for o in response.items] == [3, 5]


def test_mixed_batch_fails_only_the_bad_items(node: node_pb2_grpc.NodeStub) -> None:
    good = RNG.standard_normal((1, 512), dtype=np.float32)
    bad_bytes = encode(good)
    bad_bytes.data = bad_bytes.data[:-4]
    items = [
        tensor_item("good-1", good),
        tensor_item("wrong-dtype", good.astype(np.float64)),
        tensor_item("wrong-shape", RNG.standard_normal((1, 100), dtype=np.float32)),
        node_pb2.BatchItem(
            request_id="short-data", inputs=[common_pb2.NamedTensor(name="input", tensor=bad_bytes)]
        ),
        node_pb2.BatchItem(request_id="missing-input"),
        tensor_item("unknown-input", good, name="nope"),
        text_item("text-for-tensor", ["hello"]),
        tensor_item("good-2", good),
    ]
    response = infer(node, "mlp", "1", items)
    codes = {o.request_id: grpc.StatusCode.INVALID_ARGUMENT.value[0] == o.status.code for o in response.items}
    assert [o.request_id for o in response.items] == [i.request_id for i in items]
    assert response.items[0].status.code == 0 and response.items[-1].status.code == 0
    assert all(codes[rid] for rid in codes if not rid.startswith("good"))
    violations = unpack_details(response.items[1].status)["BadRequest"]
    assert violations.field_violations[0].field == "inputs.input.dtype"  # type: ignore[attr-defined]
    assert "expected FP32, got FP64" in response.items[1].status.message
    assert response.batch_size == 2


def test_model_error_fails_the_batch_with_its_text(node: node_pb2_grpc.NodeStub) -> None:
    clean = np.ones((1, echo.WIDTH), dtype=np.float32)
    poison = np.full((1, echo.WIDTH), POISON, dtype=np.float32)
    response = infer(node, "echo", "poison", [tensor_item("a", clean), tensor_item("b", poison)])
    for outcome in response.items:
        assert outcome.status.code == grpc.StatusCode.INTERNAL.value[0]
        assert "poison value" in outcome.status.message
        assert unpack_details(outcome.status)["ErrorInfo"].reason == "MODEL_ERROR"  # type: ignore[attr-defined]
    alone = infer(node, "echo", "poison", [tensor_item("a", clean)])
    np.testing.assert_array_equal(decode(alone.items[0].outputs[0].tensor), clean * 2)


def test_out_of_memory_splits_the_batch(node: node_pb2_grpc.NodeStub) -> None:
    rows = [np.full((1, echo.WIDTH), i, dtype=np.float32) for i in range(11)]
    response = infer(node, "echo", "oom", [tensor_item(str(i), r) for i, r in enumerate(rows)])
    for i, outcome in enumerate(response.items):
        assert outcome.status.code == 0, outcome.status.message
        np.testing.assert_array_equal(decode(outcome.outputs[0].tensor), rows[i] * 2)


def test_minilm_matches_sentence_transformers(node: node_pb2_grpc.NodeStub) -> None:
    from sentence_transformers import SentenceTransformer

    from ferryman_server.gpu_node.demo.minilm import bundled_model_dir

    texts = [
        "The ferry crosses the river.",
        "A boat carries people over water.",
        "Quarterly GPU prices rose.",
    ]
    response = infer(node, "minilm", "1", [text_item("a", texts[:2]), text_item("b", texts[2:])])
    got = np.concatenate([decode(o.outputs[0].tensor) for o in response.items])
    reference = SentenceTransformer(str(bundled_model_dir()), device="cpu").encode(texts)
    cosine = (got * reference).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(reference, axis=1))
    assert got.shape == (3, 384)
    assert cosine.min() > 0.999, cosine
    assert response.items[0].usage.input_tokens > 2 and response.items[1].usage.input_tokens > 2


def test_text_longer_than_allowed_fails_that_item(node: node_pb2_grpc.NodeStub) -> None:
    response = infer(node, "minilm", "1", [text_item("long", ["x" * 5000]), text_item("ok", ["fine"])])
    assert response.items[0].status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert response.items[1].status.code == 0


def test_node_info_reports_profiles_and_health(node: node_pb2_grpc.NodeStub, node_address: str) -> None:
    info = node.NodeInfo(node_pb2.NodeInfoRequest(), timeout=5)
    versions = {f"{v.model}:{v.version}": v for v in info.versions}
    assert info.device == "cpu" and info.memory_total > info.memory_used > 0
    assert info.lifecycle == "READY"
    profile = [p.batch_size for p in versions["mlp:1"].profile]
    assert {1, 2, 4, 8, 16, 32, 64, 128} <= set(profile)
    assert all(p.latency.ToNanoseconds() > 0 for p in versions["mlp:1"].profile)
    assert health(node_address, "") == health_pb2.HealthCheckResponse.SERVING
    assert health(node_address, "mlp:1") == health_pb2.HealthCheckResponse.SERVING
    # What each version holds, measured as it loaded: what the process gained meanwhile. A
    # load can reuse heap an earlier test freed, so no version's figure has a floor here
    # beyond being counted; together they stay within what the process holds.
    held = {key: v.memory_bytes for key, v in versions.items() if v.state == node_pb2.VERSION_STATE_SERVING}
    assert held["minilm:1"] > 0, held
    assert sum(held.values()) < info.memory_used


def test_tampered_artifact_fails_only_that_version(
    node: node_pb2_grpc.NodeStub, node_address: str, artifacts: Artifacts, tmp_path: object
) -> None:
    tampered = spec("mlp", "tampered", artifacts.mlp_export, "torch_export", mlp.SCHEMA, sha256="0" * 64)
    loaded = node.LoadModel(node_pb2.LoadModelRequest(spec=tampered), timeout=60)
    assert loaded.state == node_pb2.VERSION_STATE_FAILED
    assert "sha256 mismatch" in loaded.reason
    assert health(node_address, "mlp:tampered") == health_pb2.HealthCheckResponse.NOT_SERVING
    with pytest.raises(grpc.RpcError) as refused:
        infer(node, "mlp", "tampered", [tensor_item("x", np.zeros((1, 512), np.float32))])
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    ok = infer(node, "mlp", "1", [tensor_item("x", np.zeros((1, 512), np.float32))])
    assert ok.items[0].status.code == 0


def test_hot_swap_load_and_unload(
    node: node_pb2_grpc.NodeStub, node_address: str, artifacts: Artifacts
) -> None:
    swap = spec("mlp", "2", artifacts.mlp_export, "torch_export", mlp.SCHEMA, max_batch_size=4)
    assert (
        node.LoadModel(node_pb2.LoadModelRequest(spec=swap), timeout=60).state
        == node_pb2.VERSION_STATE_SERVING
    )
    assert health(node_address, "mlp:2") == health_pb2.HealthCheckResponse.SERVING
    assert (
        infer(node, "mlp", "2", [tensor_item("x", np.zeros((1, 512), np.float32))]).items[0].status.code == 0
    )
    assert node.UnloadModel(node_pb2.UnloadModelRequest(model="mlp", version="2"), timeout=30).unloaded
    with pytest.raises(grpc.RpcError) as gone:
        infer(node, "mlp", "2", [tensor_item("x", np.zeros((1, 512), np.float32))])
    assert gone.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert not node.UnloadModel(node_pb2.UnloadModelRequest(model="mlp", version="2"), timeout=30).unloaded


def test_empty_and_oversize_batches_are_refused(node: node_pb2_grpc.NodeStub) -> None:
    with pytest.raises(grpc.RpcError) as empty:
        infer(node, "mlp", "1", [])
    assert empty.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    items = [tensor_item(str(i), np.zeros((1, echo.WIDTH), np.float32)) for i in range(17)]
    with pytest.raises(grpc.RpcError) as oversize:
        infer(node, "echo", "poison", items)
    assert oversize.value.code() == grpc.StatusCode.INVALID_ARGUMENT
