"""Structured output on the real SmolLM2 through the official openai client: JSON mode and
JSON schemas (``response_format``, and the client's own ``parse`` with a pydantic model),
whole and streamed; every answer parses and validates against its schema. Options Ferryman
does not serve (``logprobs``, ``tools``, ``n`` > 1) and schemas it cannot compile are a 400
naming the field, never ignored. Also through ``Inference.Generate`` with the gRPC stubs."""

from __future__ import annotations

import json

import grpc
import jsonschema
import pytest
from generation_platform import MODEL, GenPlatform, curl
from real_clients import run_client

import ferryman
from ferryman.v1 import common_pb2, inference_pb2, inference_pb2_grpc
from ferryman_server.router.generation import MAX_SCHEMA_CHARS

pytestmark = pytest.mark.slow

CITY = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 40},
        "population": {"type": "integer", "minimum": 0, "maximum": 100_000_000},
    },
    "required": ["city", "population"],
    "additionalProperties": False,
}
TRIP = {
    "type": "object",
    "properties": {
        "mode": {"enum": ["ferry", "bridge", "swim"]},
        "stops": {
            "type": "array",
            "items": {"type": "string", "maxLength": 20},
            "minItems": 1,
            "maxItems": 3,
        },
        "cost": {"type": "number", "minimum": 0, "maximum": 1000},
        "booked": {"type": "boolean"},
    },
    "required": ["mode", "stops", "cost", "booked"],
    "additionalProperties": False,
}
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 30},
        "address": {
            "type": "object",
            "properties": {
                "street": {"type": "string", "maxLength": 30},
                "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
            },
            "required": ["street", "zip"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "address"],
    "additionalProperties": False,
}
SCHEMAS = {"city": CITY, "trip": TRIP, "person": PERSON}
PROMPTS = {
    "city": "What is the capital of France, and how many people live there?",
    "trip": "Plan a short trip across a river.",
    "person": "Invent a ferryman and his home address.",
}

CLIENT = """
import openai, pydantic
client = openai.OpenAI(api_key=ARGS["key"], base_url=ARGS["http"] + "/v1", max_retries=0)
out = {"schemas": {}, "refused": {}}
def chat(content, **kw):
    return client.chat.completions.create(
        model=ARGS["model"], messages=[{"role": "user", "content": content}], max_tokens=120, **kw)
for name, schema in ARGS["schemas"].items():
    fmt = {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}
    whole = chat(ARGS["prompts"][name], temperature=0, response_format=fmt)
    sampled = chat(ARGS["prompts"][name], temperature=1.0, seed=7, response_format=fmt)
    pieces = [c.choices[0].delta.content or "" for c in chat(
        ARGS["prompts"][name], temperature=0, response_format=fmt, stream=True) if c.choices]
    out["schemas"][name] = {
        "whole": whole.choices[0].message.content, "finish": whole.choices[0].finish_reason,
        "sampled": sampled.choices[0].message.content, "streamed": "".join(pieces)}
mode = chat('What is the capital of France? Answer with a JSON object whose key is "capital".',
            temperature=0, response_format={"type": "json_object"})
out["json_mode"] = [mode.choices[0].message.content, mode.choices[0].finish_reason]
class Ferry(pydantic.BaseModel):
    name: str
    cars: int
parse = getattr(client.chat.completions, "parse", None) or client.beta.chat.completions.parse
parsed = parse(model=ARGS["model"], messages=[{"role": "user", "content": "Describe a ferry."}],
               max_tokens=80, temperature=0, response_format=Ferry)
out["parsed"] = parsed.choices[0].message.parsed.model_dump()
for field, kw in {
    "logprobs": {"logprobs": True},
    "tools": {"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]},
    "n": {"n": 2},
    "json_schema": {"response_format": {"type": "json_schema", "json_schema": {
        "name": "bad", "schema": {"type": "object", "properties": {"x": {"type": "no-such-type"}}}}}},
}.items():
    try:
        chat("hi", **kw)
        out["refused"][field] = None
    except openai.BadRequestError as exc:
        out["refused"][field] = [exc.status_code, exc.body["message"]]
print(json.dumps(out))
"""


def test_every_answer_parses_and_validates_against_its_schema(gen: GenPlatform) -> None:
    out = run_client(CLIENT, key=gen.tenant(), http=gen.http, model=MODEL, schemas=SCHEMAS, prompts=PROMPTS)
    for name, schema in SCHEMAS.items():
        answers = out["schemas"][name]
        assert answers["finish"] == "stop", answers  # complete: the grammar ended it, not the limit
        for kind in ("whole", "sampled", "streamed"):
            jsonschema.validate(json.loads(answers[kind]), schema)
        assert answers["streamed"] == answers["whole"]
    text, finish = out["json_mode"]
    assert finish == "stop" and isinstance(json.loads(text), dict), out["json_mode"]
    assert isinstance(out["parsed"]["name"], str) and isinstance(out["parsed"]["cars"], int)
    for field, refusal in out["refused"].items():
        assert refusal is not None, f"{field} was served or ignored"
        status, message = refusal
        assert status == 400 and field in message, refusal


def test_schemas_that_are_not_schemas_are_400_before_any_node_sees_them(gen: GenPlatform) -> None:
    key = gen.tenant()
    messages = [{"role": "user", "content": "hi"}]

    def ask(schema: object) -> tuple[int, str]:
        fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
        return curl(
            gen, key, "/v1/chat/completions", {"model": MODEL, "messages": messages, "response_format": fmt}
        )

    huge = {"type": "object", "description": "x" * MAX_SCHEMA_CHARS}
    status, text = ask(huge)
    # The router's own words (a node's compile error would not say them).
    assert status == 400 and "json_schema" in json.loads(text)["error"]["message"]
    assert f"longer than {MAX_SCHEMA_CHARS}" in json.loads(text)["error"]["message"]
    status, text = ask(["not", "an", "object"])
    assert status == 400


def test_inference_generate_and_the_sdk_take_a_schema_over_grpc(gen: GenPlatform) -> None:
    key = gen.tenant()
    sampling = common_pb2.SamplingParams(json_schema=json.dumps(CITY))
    request = inference_pb2.GenerateRequest(
        model=MODEL,
        messages=[common_pb2.ChatMessage(role="user", content=PROMPTS["city"])],
        max_tokens=80,
        sampling=sampling,
    )
    with grpc.insecure_channel(gen.router) as channel:
        stub = inference_pb2_grpc.InferenceStub(channel)
        events = list(stub.Generate(request, metadata=[("authorization", f"Bearer {key}")], timeout=120))
        text = "".join(e.text for e in events)
        jsonschema.validate(json.loads(text), CITY)
        assert events[-1].finish_reason == common_pb2.FINISH_REASON_STOP
        bad = inference_pb2.GenerateRequest()
        bad.CopyFrom(request)
        bad.sampling.json_schema = '{"type": "object", "properties": {"x": {"type": 7}}}'
        with pytest.raises(grpc.RpcError) as refused:
            list(stub.Generate(bad, metadata=[("authorization", f"Bearer {key}")], timeout=120))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "json_schema" in (refused.value.details() or "")
    # The SDK takes the schema as a dict.
    with ferryman.Client(gen.router, key) as client:
        chunks = list(client.chat(MODEL, [{"role": "user", "content": PROMPTS["trip"]}], json_schema=TRIP))
    jsonschema.validate(json.loads("".join(c.text for c in chunks)), TRIP)
    assert chunks[-1].finish_reason == "stop"
