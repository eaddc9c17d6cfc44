"""Conversion between OIP v2 REST bodies (JSON, or JSON plus binary tensors) and the
gateway's neutral messages, through the OIP conversions its gRPC door shares."""

from __future__ import annotations

from typing import Any

from fastapi import Response
from google.protobuf.message import Message

from ferryman.v1 import common_pb2, inference_pb2
from ferryman_server.router.doors.http.caller import (
    JSON,
    answer_headers,
    parse_json,
)
from ferryman_server.router.doors.oip import convert
from ferryman_server.router.doors.oip.rest.protocol import BINARY_SIZE, HEADER_LENGTH, InferenceRequest
from ferryman_server.router.doors.oip.tensors import (
    TensorProblem,
    datatype,
    from_raw,
    from_values,
    json_data,
    raw_contents,
    select_outputs,
    shape,
)


def plain(message: Message) -> dict[str, Any]:
    """A protobuf message as JSON with every field, numbers as numbers (json_format would
    write 64-bit integers as strings) and enums by name."""

    def value(field: Any, item: Any) -> Any:
        if field.message_type is not None:
            return plain(item)
        if field.enum_type is not None:
            return field.enum_type.values_by_number[item].name
        return item

    out: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        item = getattr(message, field.name)
        out[field.name] = [value(field, i) for i in item] if field.is_repeated else value(field, item)
    return out


def parse(body: bytes, header_length: int | None) -> tuple[InferenceRequest, list[common_pb2.NamedTensor]]:
    """The request's JSON and its inputs, from JSON data or the binary section."""
    split = len(body) if header_length is None else header_length
    if not 0 <= split <= len(body):
        raise TensorProblem(HEADER_LENGTH, f"{split} is not within the body's {len(body)} bytes")
    request = parse_json(InferenceRequest, body[:split])
    binary, offset = memoryview(body)[split:], 0
    inputs = []
    for i, tensor in enumerate(request.inputs):
        field = f"inputs[{i}]"
        size = tensor.parameters.get(BINARY_SIZE)
        if size is None:
            inputs.append(
                from_values(tensor.name, tensor.datatype, tensor.shape, tensor.data, f"{field}.data")
            )
            continue
        if isinstance(size, bool) or not isinstance(size, int) or size < 0 or offset + size > len(binary):
            raise TensorProblem(f"{field}.parameters.{BINARY_SIZE}", "does not fit the binary data sent")
        raw = bytes(binary[offset : offset + size])
        offset += size
        inputs.append(from_raw(tensor.name, tensor.datatype, tensor.shape, raw, field))
    if offset != len(binary):
        raise TensorProblem("body", f"{len(binary) - offset} bytes of binary data belong to no input")
    return request, inputs


def answer(request: InferenceRequest, response: inference_pb2.PredictResponse) -> Response:
    """JSON, or JSON + binary outputs where the request asked for them."""
    binary_all = request.parameters.get("binary_data_output") is True
    binary_of = {o.name: o.parameters.get("binary_data", binary_all) is True for o in request.outputs}
    outputs, parts = [], []
    for output in select_outputs(response.outputs, [o.name for o in request.outputs]):
        described: dict[str, Any] = {
            "name": output.name,
            "datatype": datatype(output),
            "shape": shape(output),
        }
        if binary_of.get(output.name, binary_all):
            raw = raw_contents(output)
            described["parameters"] = {BINARY_SIZE: len(raw)}
            parts.append(raw)
        else:
            described["data"] = json_data(output)
        outputs.append(described)
    body = {
        "model_name": response.model,
        "model_version": response.version,
        "id": response.request_id,
        "parameters": convert.usage_parameters(response),
        "outputs": outputs,
    }
    if not parts:
        return JSON(body, headers=answer_headers(response))
    header = JSON(body).body
    return Response(
        b"".join([header, *parts]),
        media_type="application/octet-stream",
        headers={HEADER_LENGTH: str(len(header)), **answer_headers(response)},
    )
