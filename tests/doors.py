"""One small client per front door, each speaking its door's own wire format (gRPC stubs,
JSON over HTTP, the binary tensor extension), so one test suite runs over every door and
compares what they answer. Real clients from PyPI are tested in test_real_clients.py."""

from __future__ import annotations

import json
import struct
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc
import numpy as np
from grpc_status import rpc_status

from ferryman.errors import unpack_details
from ferryman.oip.v2 import grpc_predict_v2_pb2 as oip
from ferryman.oip.v2 import grpc_predict_v2_pb2_grpc as oip_grpc
from ferryman.tensors import decode, encode
from ferryman.v1 import common_pb2, inference_pb2, inference_pb2_grpc
from ferryman_server.router.doors.http.errors import HTTP_STATUS

TIMEOUT_S = 30.0
CODE_BY_HTTP = {status: code.name for code, status in reversed(list(HTTP_STATUS.items()))}
Inputs = dict[str, np.ndarray | list[str]]


@dataclass(frozen=True)
class Answer:
    outputs: dict[str, np.ndarray]
    version: str
    request_id: str
    coalesced: bool


@dataclass(frozen=True)
class Refusal:
    code: str
    """The gRPC code's name (HTTP doors: the code their status maps from)."""
    retry_after_s: float | None


Outcome = Answer | Refusal


def bearer(key: str) -> str:
    return f"Bearer {key}"


class Door:
    name = ""
    tensors = True
    """False for doors that take only text (OpenAI embeddings)."""

    def predict(
        self,
        key: str,
        model: str,
        inputs: Inputs,
        *,
        request_id: str = "",
        user: str = "",
        version: str = "",
        parameters: dict[str, str] | None = None,
        traceparent: str = "",
    ) -> Outcome:
        raise NotImplementedError


def named(inputs: Inputs) -> list[common_pb2.NamedTensor]:
    return [
        common_pb2.NamedTensor(name=n, text=common_pb2.TextList(values=v))
        if isinstance(v, list)
        else common_pb2.NamedTensor(name=n, tensor=encode(v))
        for n, v in inputs.items()
    ]


def grpc_refusal(error: grpc.RpcError) -> Refusal:
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    retry = unpack_details(status).get("RetryInfo") if status else None
    delay = retry.retry_delay.ToTimedelta().total_seconds() if retry is not None else None  # type: ignore[attr-defined]
    return Refusal(error.code().name, delay)


class Native(Door):
    name = "ferryman"

    def __init__(self, address: str) -> None:
        self._stub = inference_pb2_grpc.InferenceStub(grpc.insecure_channel(address))

    def predict(self, key: str, model: str, inputs: Inputs, **kw: Any) -> Outcome:
        request = inference_pb2.PredictRequest(
            request_id=kw.get("request_id", ""),
            model=model,
            version=kw.get("version", ""),
            user=kw.get("user", ""),
            parameters=kw.get("parameters") or {},
            inputs=named(inputs),
        )
        metadata = [("authorization", bearer(key))]
        if kw.get("traceparent"):
            metadata.append(("traceparent", kw["traceparent"]))
        try:
            response = self._stub.Predict(request, metadata=metadata, timeout=TIMEOUT_S)
        except grpc.RpcError as error:
            return grpc_refusal(error)
        outputs = {
            o.name: np.array(o.text.values) if o.WhichOneof("value") == "text" else decode(o.tensor)
            for o in response.outputs
        }
        return Answer(outputs, response.version, response.request_id, response.coalesced)


def oip_parameters(kw: dict[str, Any]) -> dict[str, str]:
    parameters = dict(kw.get("parameters") or {})
    if kw.get("user"):
        parameters["user"] = kw["user"]
    return parameters


def bytes_elements(values: Sequence[str]) -> bytes:
    return b"".join(struct.pack("<I", len(v.encode())) + v.encode() for v in values)


class OipGrpc(Door):
    name = "oip-grpc"

    def __init__(self, address: str) -> None:
        self._stub = oip_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(address))

    def predict(self, key: str, model: str, inputs: Inputs, **kw: Any) -> Outcome:
        request = oip.ModelInferRequest(
            model_name=model,
            model_version=kw.get("version", ""),
            id=kw.get("request_id", ""),
            parameters={k: oip.InferParameter(string_param=v) for k, v in oip_parameters(kw).items()},
        )
        for n, v in inputs.items():
            if isinstance(v, list):
                request.inputs.add(name=n, datatype="BYTES", shape=[len(v)])
                request.raw_input_contents.append(bytes_elements(v))
            else:
                request.inputs.add(name=n, datatype="FP32", shape=list(v.shape))
                request.raw_input_contents.append(v.astype("<f4").tobytes())
        metadata = [("authorization", bearer(key))]
        if kw.get("traceparent"):
            metadata.append(("traceparent", kw["traceparent"]))
        try:
            response = self._stub.ModelInfer(request, metadata=metadata, timeout=TIMEOUT_S)
        except grpc.RpcError as error:
            return grpc_refusal(error)
        outputs = {
            o.name: np.frombuffer(raw, dtype="<f4").reshape(list(o.shape))
            for o, raw in zip(response.outputs, response.raw_output_contents, strict=True)
        }
        coalesced = response.parameters["ferryman.coalesced"].bool_param
        return Answer(outputs, response.model_version, response.id, coalesced)


def http_call(url: str, body: bytes | None, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(
        url, data=body, headers=headers, method="POST" if body is not None else "GET"
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return response.status, lowered(response.headers.items()), response.read()
    except urllib.error.HTTPError as error:
        return error.code, lowered(error.headers.items()), error.read()


def lowered(headers: Any) -> dict[str, str]:
    """Header names in lower case (HTTP names are case-insensitive; uvicorn sends them so)."""
    return {k.lower(): v for k, v in headers}


def http_refusal(status: int, headers: dict[str, str]) -> Refusal:
    retry = headers.get("retry-after")
    return Refusal(CODE_BY_HTTP.get(status, "UNKNOWN"), float(retry) if retry else None)


class OipRest(Door):
    def __init__(self, base: str, binary: bool) -> None:
        self._base = base
        self._binary = binary
        self.name = "oip-rest-binary" if binary else "oip-rest-json"

    def predict(self, key: str, model: str, inputs: Inputs, **kw: Any) -> Outcome:
        tensors, blobs = [], []
        for n, v in inputs.items():
            is_text = isinstance(v, list)
            described: dict[str, Any] = {
                "name": n,
                "datatype": "BYTES" if is_text else "FP32",
                "shape": [len(v)] if isinstance(v, list) else list(v.shape),
            }
            if self._binary:
                blob = bytes_elements(v) if isinstance(v, list) else v.astype("<f4").tobytes()
                described["parameters"] = {"binary_data_size": len(blob)}
                blobs.append(blob)
            else:
                described["data"] = v if isinstance(v, list) else v.reshape(-1).tolist()
            tensors.append(described)
        document = {"id": kw.get("request_id", ""), "parameters": oip_parameters(kw), "inputs": tensors}
        header = json.dumps(document).encode()
        headers = {"Authorization": bearer(key), "Content-Type": "application/json"}
        if self._binary:
            headers["Inference-Header-Content-Length"] = str(len(header))
        if kw.get("traceparent"):
            headers["traceparent"] = kw["traceparent"]
        path = f"/v2/models/{model}" + (f"/versions/{kw['version']}" if kw.get("version") else "") + "/infer"
        status, got, body = http_call(self._base + path, header + b"".join(blobs), headers)
        if status != 200:
            return http_refusal(status, got)
        split = int(got.get("inference-header-content-length", len(body)))
        answer, offset, outputs = json.loads(body[:split]), split, {}
        for o in answer["outputs"]:
            if "data" in o:
                outputs[o["name"]] = np.array(o["data"], dtype="<f4").reshape(o["shape"])
            else:
                size = o["parameters"]["binary_data_size"]
                outputs[o["name"]] = np.frombuffer(body[offset : offset + size], "<f4").reshape(o["shape"])
                offset += size
        return Answer(
            outputs, answer["model_version"], answer["id"], answer["parameters"]["ferryman.coalesced"]
        )


class OpenAI(Door):
    name = "openai"
    tensors = False

    def __init__(self, base: str) -> None:
        self._base = base

    def predict(self, key: str, model: str, inputs: Inputs, **kw: Any) -> Outcome:
        (texts,) = inputs.values()
        document = {"model": model, "input": texts, "encoding_format": "float", "user": kw.get("user", "")}
        headers = {"Authorization": bearer(key), "Content-Type": "application/json"}
        if kw.get("request_id"):
            headers["Idempotency-Key"] = kw["request_id"]
        if kw.get("traceparent"):
            headers["traceparent"] = kw["traceparent"]
        status, got, body = http_call(self._base + "/v1/embeddings", json.dumps(document).encode(), headers)
        if status != 200:
            return http_refusal(status, got)
        rows = [d["embedding"] for d in json.loads(body)["data"]]
        return Answer(
            {"embedding": np.array(rows, dtype="<f4")},
            got["x-ferryman-version"],
            got["x-request-id"],
            got["x-ferryman-coalesced"] == "true",
        )


def every_door(router: str, http: str) -> list[Door]:
    return [
        Native(router),
        OipGrpc(router),
        OipRest(http, binary=False),
        OipRest(http, binary=True),
        OpenAI(http),
    ]


DOOR_NAMES = ["ferryman", "oip-grpc", "oip-rest-json", "oip-rest-binary", "openai"]
