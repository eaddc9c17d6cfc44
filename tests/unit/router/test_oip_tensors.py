"""OIP tensors <-> NamedTensor: raw, typed and JSON contents, BYTES as text, and every
hostile shape, count or encoding refused with the field named (no sockets)."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from ferryman.oip.v2 import grpc_predict_v2_pb2 as oip
from ferryman.tensors import decode
from ferryman.v1 import common_pb2
from ferryman_server.router.bounds import MAX_INPUTS
from ferryman_server.router.doors.oip.tensors import (
    MAX_ELEMENTS,
    MAX_TEXT_ELEMENTS,
    TensorProblem,
    from_raw,
    from_values,
    grpc_inputs,
    json_data,
    raw_contents,
    select_outputs,
    split_raw_strings,
)


def strings(*values: bytes) -> bytes:
    return b"".join(struct.pack("<I", len(v)) + v for v in values)


def test_raw_fp32_keeps_its_bytes() -> None:
    x = np.arange(6, dtype="<f4").reshape(2, 3)
    named = from_raw("input", "FP32", [2, 3], x.tobytes(), "inputs[0]")
    np.testing.assert_array_equal(decode(named.tensor), x)


def test_typed_and_json_contents_give_the_same_tensor() -> None:
    typed = from_values("input", "INT32", [2, 2], [1, 2, 3, 4], "inputs[0]")
    nested = from_values("input", "INT32", [2, 2], [[1, 2], [3, 4]], "inputs[0]")
    assert typed == nested
    assert decode(typed.tensor).dtype == np.dtype("<i4")


def test_bytes_are_text_one_string_per_item() -> None:
    raw = from_raw("text", "BYTES", [2, 1], strings(b"hello", "ünï".encode()), "inputs[0]")
    assert list(raw.text.values) == ["hello", "ünï"]
    assert from_values("text", "BYTES", [2], ["hello", "ünï"], "inputs[0]") == raw
    assert from_values("text", "BYTES", [2], [b"hello", "ünï".encode()], "inputs[0]") == raw


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (strings(b"a"), "fewer than 2"),
        (strings(b"a", b"b", b"c"), "more than 2"),
        (struct.pack("<I", 1000) + b"short", "past the end"),
        (strings(b"\xff\xfe", b"ok"), "not UTF-8"),
    ],
)
def test_malformed_raw_bytes_are_refused(raw: bytes, problem: str) -> None:
    with pytest.raises(TensorProblem, match=problem) as raised:
        from_raw("text", "BYTES", [2], raw, "inputs[0]")
    assert raised.value.field == "inputs[0]"


@pytest.mark.parametrize(
    ("datatype", "shape", "values", "field", "problem"),
    [
        ("FP33", [1], [1.0], "inputs[0].datatype", "unsupported datatype"),
        ("FP32", [2, 2], [1.0, 2.0, 3.0], "inputs[0].data", "3 elements for shape"),
        ("FP32", [-1, 2], [], "inputs[0].shape", "non-negative"),
        ("FP32", [], [], "inputs[0].shape", "non-negative"),
        ("FP32", [1 << 20, 1 << 10], [], "inputs[0].shape", f"more than {MAX_ELEMENTS}"),
        ("FP32", [2], ["a", "b"], "inputs[0].data", "not FP32 numbers"),
        ("BF16", [1], [1.0], "inputs[0].datatype", "raw or binary"),
        ("BYTES", [2, 2], ["a"] * 4, "inputs[0].shape", r"\[n\] or \[n, 1\]"),
        ("BYTES", [MAX_TEXT_ELEMENTS + 1], [], "inputs[0].shape", "strings"),
        ("BYTES", [1], [3], "inputs[0].data", "must be strings"),
        ("FP32", [1], None, "inputs[0].data", "required"),
    ],
)
def test_bad_values_name_the_field(
    datatype: str, shape: list[int], values: list[object], field: str, problem: str
) -> None:
    with pytest.raises(TensorProblem, match=problem) as raised:
        from_values("input", datatype, shape, values, "inputs[0]")
    assert raised.value.field == field


def test_raw_bytes_of_the_wrong_length_are_refused() -> None:
    with pytest.raises(TensorProblem, match="needs 8"):
        from_raw("input", "FP32", [2], b"\x00" * 7, "inputs[0]")


def test_a_huge_declared_string_count_is_refused_before_parsing() -> None:
    # Millions of empty elements would be millions of Python objects: bounded first.
    with pytest.raises(TensorProblem, match="strings"):
        from_raw("text", "BYTES", [10_000_000], b"\x00" * 40_000_000, "inputs[0]")
    with pytest.raises(TensorProblem, match="fewer than"):
        split_raw_strings(b"", 1, "inputs[0]")


def test_grpc_inputs_take_raw_or_typed_never_both() -> None:
    request = oip.ModelInferRequest(model_name="mlp")
    request.inputs.add(name="input", datatype="FP32", shape=[1, 2])
    request.raw_input_contents.append(np.array([1, 2], "<f4").tobytes())
    (named,) = grpc_inputs(request)
    np.testing.assert_array_equal(decode(named.tensor), [[1, 2]])
    request.inputs[0].contents.fp32_contents.extend([1.0, 2.0])
    with pytest.raises(TensorProblem, match="beside raw_input_contents"):
        grpc_inputs(request)
    request.raw_input_contents.append(b"")
    with pytest.raises(TensorProblem, match="2 entries for 1 inputs"):
        grpc_inputs(request)


def test_typed_grpc_contents_by_datatype() -> None:
    request = oip.ModelInferRequest(model_name="m")
    tensor = request.inputs.add(name="input", datatype="FP32", shape=[2])
    tensor.contents.fp32_contents.extend([0.5, 1.5])
    text = request.inputs.add(name="text", datatype="BYTES", shape=[1])
    text.contents.bytes_contents.append(b"hi")
    half = request.inputs.add(name="half", datatype="FP16", shape=[1])
    with pytest.raises(TensorProblem, match="must come as raw_input_contents"):
        grpc_inputs(request)
    request.inputs.remove(half)
    numbers, words = grpc_inputs(request)
    np.testing.assert_array_equal(decode(numbers.tensor), [0.5, 1.5])
    assert list(words.text.values) == ["hi"]


def test_outputs_render_raw_and_json() -> None:
    tensor = common_pb2.NamedTensor(
        name="output",
        tensor=common_pb2.Tensor(
            dtype=common_pb2.DATA_TYPE_FP32, shape=[2], data=np.array([1, 2], "<f4").tobytes()
        ),
    )
    text = common_pb2.NamedTensor(name="words", text=common_pb2.TextList(values=["a", "bé"]))
    assert json_data(tensor) == [1.0, 2.0]
    assert raw_contents(text) == strings(b"a", "bé".encode())
    assert select_outputs([tensor, text], ["words"]) == [text]
    assert select_outputs([tensor, text], []) == [tensor, text]
    with pytest.raises(TensorProblem, match="not an output"):
        select_outputs([tensor], ["nope"])


def test_an_oip_request_with_too_many_inputs_is_refused_before_any_is_converted() -> None:
    request = oip.ModelInferRequest(model_name="m")
    for i in range(MAX_INPUTS + 1):
        request.inputs.add(name=f"x{i}", datatype="FP32", shape=[1]).contents.fp32_contents.append(1.0)
    with pytest.raises(TensorProblem, match="more than") as raised:
        grpc_inputs(request)
    assert raised.value.field == "inputs"
