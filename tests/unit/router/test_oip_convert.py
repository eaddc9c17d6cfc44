"""OIP request parameters -> the neutral request, and the catalogue as OIP messages (no sockets)."""

from __future__ import annotations

import pytest

from ferryman.oip.v2 import grpc_predict_v2_pb2 as oip
from ferryman.v1 import inference_pb2
from ferryman_server.kernel.schema import IOSchema
from ferryman_server.registry.snapshot import VersionRecord
from ferryman_server.router.doors.oip.convert import (
    check_outputs,
    config,
    grpc_parameters,
    metadata,
    predict_request,
)
from ferryman_server.router.failures import RequestFailed

SCHEMA = IOSchema.model_validate(
    {
        "inputs": [{"name": "input", "dtype": "FP32", "shape": [512]}, {"name": "text", "text": True}],
        "outputs": [{"name": "output", "dtype": "FP32", "shape": [10]}],
        "max_items": 128,
    }
)
RECORD = VersionRecord("mlp", "1", "ACTIVE", SCHEMA, 64, 0.0, 0.0)


def test_steering_parameters_are_not_model_parameters() -> None:
    request = predict_request(
        "mlp",
        "2",
        "id-1",
        {"timeout": 250_000, "user": "alice", "binary_data_output": True, "temperature": 0.5, "fast": True},
        [],
    )
    assert request.request_id == "id-1" and request.model == "mlp" and request.version == "2"
    assert request.timeout.ToMicroseconds() == 250_000
    assert request.user == "alice"
    assert dict(request.parameters) == {"temperature": "0.5", "fast": "true"}


@pytest.mark.parametrize("timeout", [-1, "soon", True, 1.5, 10**30])
def test_a_timeout_must_be_non_negative_microseconds(timeout: object) -> None:
    with pytest.raises(RequestFailed, match="timeout"):
        predict_request("mlp", "", "", {"timeout": timeout}, [])  # type: ignore[dict-item]


def test_a_huge_number_is_refused_with_its_name_clipped() -> None:
    """Python prints no integer past 4,300 digits, and none past int64 reaches a model."""
    for value in (2**64, -(2**64), 10**5000):
        with pytest.raises(RequestFailed, match="64 bits") as refused:
            predict_request("mlp", "", "", {"k" * 500: value}, [])
        assert len(refused.value.status.message) < 300
    assert predict_request("mlp", "", "", {"n": 2**63 - 1}, []).parameters["n"] == str(2**63 - 1)


def test_an_empty_id_stays_empty_for_the_router_to_name() -> None:
    """Only an id the client chose binds a repeat to its answer: the door invents none."""
    assert predict_request("mlp", "", "", {}, []).request_id == ""
    assert predict_request("mlp", "", "mine", {}, []).request_id == "mine"


def test_metadata_and_config_describe_items_the_triton_way() -> None:
    info = inference_pb2.ModelInfo(name="mlp", versions=[inference_pb2.VersionInfo(version="1", weight=100)])
    meta = metadata(info, RECORD)
    assert [(t.name, t.datatype, list(t.shape)) for t in meta.inputs] == [
        ("input", "FP32", [-1, 512]),
        ("text", "BYTES", [-1]),
    ]
    assert list(meta.versions) == ["1"]
    cfg = config(RECORD)
    assert cfg.max_batch_size == 64
    assert [(i.name, i.data_type, list(i.dims)) for i in cfg.input] == [
        ("input", 11, [512]),
        ("text", 13, [1]),
    ]


def test_a_flood_of_oip_parameters_is_refused_before_it_is_read() -> None:
    request = oip.ModelInferRequest(model_name="m")
    for i in range(1000):
        request.parameters[f"p{i}"].string_param = "v"
    with pytest.raises(RequestFailed, match="parameters"):
        grpc_parameters(request)
    with pytest.raises(RequestFailed, match="outputs"):
        check_outputs(inference_pb2.ModelInfo(name="m"), [f"o{i}" for i in range(100)])
