"""Real, unmodified clients from PyPI against the router's standard doors: tritonclient
(gRPC and HTTP), the official openai client, curl; and the standard health service for
the OIP service name. Each must get the numbers ferryman.Client gets."""

from __future__ import annotations

import gzip
import hashlib
import json
import subprocess
import urllib.request
from importlib import resources
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from real_clients import run_client
from router_platform import E2E

import ferryman
from ferryman_server.registry.specs import QuotaLimits

RNG = np.random.default_rng(21)
TEXTS = ["The capital of France is Paris.", "Ferries cross rivers."]
CURL_TIMEOUT_S = 30

TRITON_GRPC = """
import numpy as np, tritonclient.grpc as triton
from tritonclient.utils import InferenceServerException
headers = lambda: {"authorization": "Bearer " + ARGS["key"]}
client = triton.InferenceServerClient(ARGS["router"])
x = np.array(json.loads(ARGS["x"]), dtype=np.float32)
out = {"live": client.is_server_live(), "ready": client.is_server_ready(),
       "model_ready": client.is_model_ready("mlp", headers=headers()),
       "server": client.get_server_metadata(as_json=True)}
out["mlp_meta"] = client.get_model_metadata("mlp", headers=headers(), as_json=True)
out["minilm_meta"] = client.get_model_metadata("minilm", headers=headers(), as_json=True)
tensor = triton.InferInput("input", list(x.shape), "FP32"); tensor.set_data_from_numpy(x)
result = client.infer("mlp", [tensor], model_version="1", request_id="tg-1", headers=headers())
out["mlp"] = result.as_numpy("output").tolist()
out["mlp_version"] = result.get_response().model_version
text = triton.InferInput("text", [2, 1], "BYTES")
text.set_data_from_numpy(np.array([[t.encode()] for t in ARGS["texts"]], dtype=object))
out["minilm"] = client.infer("minilm", [text], headers=headers()).as_numpy("embedding").tolist()
answers = []
client.start_stream(callback=lambda result, error: answers.append((result, error)), headers=headers())
for i in range(3):
    tensor = triton.InferInput("input", list(x.shape), "FP32"); tensor.set_data_from_numpy(x * (i + 1))
    client.async_stream_infer("mlp", [tensor], model_version="1", request_id=f"ts-{i}")
client.stop_stream()
out["stream"] = sorted((r.get_response().id, r.as_numpy("output").tolist()) for r, e in answers if e is None)
out["stream_errors"] = [str(e) for r, e in answers if e is not None]
config = client.get_model_config("mlp", headers=headers(), as_json=True)["config"]
out["config"] = {"max_batch_size": config["max_batch_size"], "input": config["input"]}
stats = client.get_inference_statistics("mlp", headers=headers(), as_json=True)
out["stats_versions"] = sorted(s.get("version", "") for s in stats["model_stats"])
try:
    client.get_model_metadata("mlp", headers={"authorization": "Bearer nope"})
except InferenceServerException as exc:
    out["bad_key"] = exc.status()
try:
    client.infer("no-such-model", [tensor], headers=headers())
except InferenceServerException as exc:
    out["unknown"] = exc.status()
out["secret"] = []
for ask in (client.get_model_metadata, client.is_model_ready, client.get_model_config):
    try:
        ask("secret", headers=headers())
    except InferenceServerException as exc:
        out["secret"].append(exc.status())
print(json.dumps(out))
"""

TRITON_HTTP = """
import numpy as np, tritonclient.http as triton
from tritonclient.utils import InferenceServerException
headers = lambda: {"authorization": "Bearer " + ARGS["key"]}
client = triton.InferenceServerClient(ARGS["http"])
x = np.array(json.loads(ARGS["x"]), dtype=np.float32)
out = {"live": client.is_server_live(), "ready": client.is_server_ready(),
       "model_ready": client.is_model_ready("mlp", headers=headers()),
       "server": client.get_server_metadata()}
out["mlp_meta"] = client.get_model_metadata("mlp", headers=headers())
for binary in (True, False):
    tensor = triton.InferInput("input", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x, binary_data=binary)
    wanted = [triton.InferRequestedOutput("output", binary_data=binary)]
    result = client.infer("mlp", [tensor], model_version="1", outputs=wanted, headers=headers())
    out[f"mlp_{'binary' if binary else 'json'}"] = result.as_numpy("output").tolist()
text = triton.InferInput("text", [2], "BYTES")
text.set_data_from_numpy(np.array([t.encode() for t in ARGS["texts"]], dtype=object))
out["minilm"] = client.infer("minilm", [text], headers=headers()).as_numpy("embedding").tolist()
out["config_max_batch"] = client.get_model_config("mlp", headers=headers())["max_batch_size"]
try:
    client.get_model_metadata("mlp", headers={"authorization": "Bearer nope"})
except InferenceServerException as exc:
    out["bad_key"] = exc.status()
print(json.dumps(out))
"""

OPENAI = """
import openai
client = openai.OpenAI(api_key=ARGS["key"], base_url=ARGS["http"] + "/v1", max_retries=0)
default = client.embeddings.create(model="minilm", input=ARGS["texts"], user="alice")
floats = client.embeddings.create(model="minilm", input=ARGS["texts"][0], encoding_format="float")
out = {"default": [d.embedding for d in default.data], "model": default.model,
       "usage": [default.usage.prompt_tokens, default.usage.total_tokens],
       "float": floats.data[0].embedding, "models": sorted(m.id for m in client.models.list())}
try:
    openai.OpenAI(api_key="nope", base_url=ARGS["http"] + "/v1", max_retries=0).embeddings.create(
        model="minilm", input="x")
except openai.AuthenticationError as exc:
    out["bad_key"] = [exc.status_code, exc.body["type"]]
try:
    client.embeddings.create(model="no-such-model", input="x")
except openai.NotFoundError as exc:
    out["unknown"] = exc.status_code
print(json.dumps(out))
"""

LANGCHAIN = """
os.environ["TIKTOKEN_CACHE_DIR"] = ARGS["tiktoken_cache"]
import tiktoken
from langchain_openai import OpenAIEmbeddings
# As LangChain's docs write it: the default check_embedding_ctx_length sends token arrays.
embeddings = OpenAIEmbeddings(model="minilm", api_key=ARGS["key"], base_url=ARGS["http"] + "/v1")
out = {"documents": embeddings.embed_documents(ARGS["texts"]),
       "query": embeddings.embed_query(ARGS["texts"][1]),
       "sent": [tiktoken.get_encoding("cl100k_base").encode(t) for t in ARGS["texts"]]}
print(json.dumps(out))
"""

# tiktoken's cache key for the cl100k_base file: the sha1 of the address it would download from.
CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"


def seeded_tiktoken_cache(directory: Path) -> Path:
    """A tiktoken cache holding cl100k_base, as an offline site seeds it: the file ships in
    bpe-openai (byte for byte OpenAI's; tiktoken checks its sha256 before use)."""
    data = gzip.decompress((resources.files("bpe_openai.data") / "cl100k_base.tiktoken.gz").read_bytes())
    (directory / hashlib.sha1(CL100K_URL.encode()).hexdigest()).write_bytes(data)
    return directory


def ferryman_answers(e2e: E2E, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    with ferryman.Client(e2e.router, e2e.keys["acme"]) as client:
        mlp = client.predict("mlp", x, version="1").outputs["output"]
        embedding = client.predict("minilm", {"text": TEXTS}).outputs["embedding"]
    assert isinstance(mlp, np.ndarray) and isinstance(embedding, np.ndarray)
    return mlp, embedding


def close(got: Any, want: np.ndarray) -> None:
    np.testing.assert_allclose(np.asarray(got, dtype=np.float32), want, rtol=1e-5, atol=1e-6)


def test_tritonclient_grpc_gets_what_ferryman_client_gets(e2e: E2E) -> None:
    x = RNG.standard_normal((2, 512), dtype=np.float32)
    mlp, embedding = ferryman_answers(e2e, x)
    out = run_client(
        TRITON_GRPC, router=e2e.router, key=e2e.keys["acme"], x=json.dumps(x.tolist()), texts=TEXTS
    )
    assert out["live"] and out["ready"] and out["model_ready"]
    assert out["server"]["name"] == "ferryman" and "binary_tensor_data" in out["server"]["extensions"]
    assert out["mlp_meta"]["inputs"] == [{"name": "input", "datatype": "FP32", "shape": ["-1", "512"]}]
    assert out["minilm_meta"]["inputs"][0]["datatype"] == "BYTES"
    close(out["mlp"], mlp)
    assert out["mlp_version"] == "1"
    close(out["minilm"], embedding)
    assert out["stream_errors"] == []
    assert [i for i, _ in out["stream"]] == ["ts-0", "ts-1", "ts-2"]
    for i, (_, got) in enumerate(out["stream"]):
        close(got, ferryman_answers(e2e, x * (i + 1))[0])
    assert out["config"]["max_batch_size"] == 64
    assert out["config"]["input"] == [{"name": "input", "data_type": "TYPE_FP32", "dims": ["512"]}]
    assert "1" in out["stats_versions"] and "" not in out["stats_versions"], "statistics are per version"
    assert out["bad_key"] == "StatusCode.UNAUTHENTICATED"
    assert out["unknown"] == "StatusCode.NOT_FOUND"
    assert out["secret"] == ["StatusCode.NOT_FOUND"] * 3, "another tenant's private model stays unknown"


def test_tritonclient_http_gets_what_ferryman_client_gets(e2e: E2E) -> None:
    x = RNG.standard_normal((2, 512), dtype=np.float32)
    mlp, embedding = ferryman_answers(e2e, x)
    http = e2e.http.removeprefix("http://")
    out = run_client(TRITON_HTTP, http=http, key=e2e.keys["acme"], x=json.dumps(x.tolist()), texts=TEXTS)
    assert out["live"] and out["ready"] and out["model_ready"]
    assert out["server"]["name"] == "ferryman"
    assert out["mlp_meta"]["outputs"] == [{"name": "output", "datatype": "FP32", "shape": [-1, 10]}]
    close(out["mlp_binary"], mlp)
    close(out["mlp_json"], mlp)
    close(out["minilm"], embedding)
    assert out["config_max_batch"] == 64
    assert out["bad_key"] == "401"


def test_openai_client_embeddings_match_ferryman_client(e2e: E2E) -> None:
    _, embedding = ferryman_answers(e2e, np.zeros((1, 512), np.float32))
    out = run_client(OPENAI, http=e2e.http, key=e2e.keys["acme"], texts=TEXTS)
    close(out["default"], embedding)  # the client asks for base64 unless told otherwise
    close(out["float"], embedding[0])
    assert out["model"] == "minilm" and out["usage"][0] == out["usage"][1] > 0
    assert {"minilm", "mlp", "embed"} <= set(out["models"]) and "secret" not in out["models"]
    assert out["bad_key"] == [401, "authentication_error"]
    assert out["unknown"] == 404


def test_langchain_default_embeddings_send_token_arrays_and_get_the_texts_embeddings(
    e2e: E2E, tmp_path: Path
) -> None:
    _, embedding = ferryman_answers(e2e, np.zeros((1, 512), np.float32))
    out = run_client(
        LANGCHAIN,
        http=e2e.http,
        key=e2e.keys["acme"],
        texts=TEXTS,
        tiktoken_cache=str(seeded_tiktoken_cache(tmp_path)),
    )
    assert all(len(ids) > 1 for ids in out["sent"])
    # LangChain normalizes what it gets (one chunk per text here): the same direction as the
    # embedding of the text itself, though what went over the wire were cl100k_base ids.
    unit = embedding / np.linalg.norm(embedding, axis=1, keepdims=True)
    close(out["documents"], unit)
    close(out["query"], unit[1])


def test_health_is_what_load_balancers_and_guidellm_probe(e2e: E2E) -> None:
    with urllib.request.urlopen(f"{e2e.http}/health", timeout=CURL_TIMEOUT_S) as health:
        assert health.status == 200 and json.loads(health.read()) == {"ready": True}


def curl(*args: str) -> tuple[int, dict[str, str], Any]:
    done = subprocess.run(
        ["curl", "-s", "-i", "--max-time", str(CURL_TIMEOUT_S), *args],
        capture_output=True,
        text=True,
        timeout=CURL_TIMEOUT_S + 5,
        check=True,
    )
    head, _, body = done.stdout.replace("\r\n", "\n").partition("\n\n")
    lines = head.splitlines()
    headers = dict(line.lower().split(": ", 1) for line in lines[1:] if ": " in line)
    return int(lines[0].split()[1]), headers, json.loads(body)


def test_curl_sees_rest_errors_with_codes_fields_and_retry_after(e2e: E2E) -> None:
    url = f"{e2e.http}/v2/models/mlp/infer"
    good = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 512], "data": [0.5] * 512}]}
    bad_key = ("-H", "Authorization: Bearer fm_wrong", "-d", json.dumps(good))
    status, _, body = curl(url, *bad_key)
    assert status == 401 and "API key" in body["error"]
    key = ("-H", f"Authorization: Bearer {e2e.keys['acme']}")
    status, _, body = curl(f"{e2e.http}/v2/models/nope/infer", *key, "-d", json.dumps(good))
    assert status == 404 and body["reason"] == "UNKNOWN_MODEL"
    wrong = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 3], "data": [1, 2, 3]}]}
    status, _, body = curl(url, *key, "-d", json.dumps(wrong))
    assert status == 400 and body["violations"][0]["field"] == "inputs.input.shape"
    status, _, body = curl(url, *key, "-d", '{"inputs": [{"name": "input"}]}')
    assert status == 400 and {v["field"] for v in body["violations"]} >= {
        "inputs.0.shape",
        "inputs.0.datatype",
    }
    metered = (
        "-H",
        f"Authorization: Bearer {e2e.new_tenant('curl', QuotaLimits(rpm=5))}",
        "-d",
        json.dumps(good),
    )
    statuses = [curl(url, *metered) for _ in range(7)]
    refused = [(h, b) for s, h, b in statuses if s == 429]
    assert refused, f"rpm 5 refuses within 7 requests: {[s for s, _, _ in statuses]}"
    headers, body = refused[0]
    assert int(headers["retry-after"]) >= 1 and body["reason"] == "QUOTA_EXCEEDED"
    status, _, body = curl(
        f"{e2e.http}/v1/embeddings", *metered[:2], "-d", '{"model": "minilm", "input": "x"}'
    )
    assert status == 429 and body["error"]["type"] == "rate_limit_error"


def test_openapi_document_describes_the_routes(e2e: E2E) -> None:
    status, _, document = curl(f"{e2e.http}/openapi.json")
    assert status == 200
    paths = document["paths"]
    for path in ("/v2/models/{model}/infer", "/v2/health/live", "/v1/embeddings", "/v1/models"):
        assert path in paths, path
    body = paths["/v2/models/{model}/infer"]["post"]["requestBody"]["content"]
    assert body["application/json"]["schema"]["$ref"] == "#/components/schemas/InferenceRequest"
    assert {"InferenceRequest", "EmbeddingRequest"} <= set(document["components"]["schemas"])
    assert "HTTPBearer" in document["components"]["securitySchemes"]


@pytest.mark.parametrize("service", ["", "ferryman.v1.Inference", "inference.GRPCInferenceService"])
def test_health_answers_for_every_public_service_name(e2e: E2E, service: str) -> None:
    health = health_pb2_grpc.HealthStub(grpc.insecure_channel(e2e.router))
    answer = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
    assert answer.status == health_pb2.HealthCheckResponse.SERVING
