"""The OpenAI-compatible generation endpoints driven by the official openai client (its
own venv) and curl: chat and completions, whole and streamed (server-sent events), usage,
stop strings, token limits cut as a length finish, and refusals in OpenAI's shape."""

from __future__ import annotations

import json
import uuid

import pytest
from generation_platform import MODEL, GenPlatform, curl
from real_clients import run_client

from ferryman_server.registry.specs import QuotaLimits

# Left out of make test-fast: the real SmolLM2 model and the openai client.
pytestmark = pytest.mark.slow

CHAT = """
import openai
client = openai.OpenAI(api_key=ARGS["key"], base_url=ARGS["http"] + "/v1", max_retries=0)
messages = [{"role": "user", "content": "What is the capital of France?"}]
whole = client.chat.completions.create(model=ARGS["model"], messages=messages, max_tokens=16, temperature=0)
pieces, finish, usage = [], None, None
for chunk in client.chat.completions.create(
    model=ARGS["model"], messages=messages, max_tokens=16, temperature=0, stream=True,
    stream_options={"include_usage": True},
):
    if chunk.usage is not None:
        usage = chunk.usage.model_dump()
    for choice in chunk.choices:
        pieces.append(choice.delta.content or "")
        finish = choice.finish_reason or finish
done = client.completions.create(
    model=ARGS["model"], prompt="The capital of France is", max_tokens=8, temperature=0
)
try:
    client.chat.completions.create(model="nope", messages=messages)
    missing = None
except openai.NotFoundError as exc:
    missing = exc.status_code
print(json.dumps({
    "whole": whole.choices[0].message.content,
    "whole_finish": whole.choices[0].finish_reason,
    "whole_usage": whole.usage.model_dump(),
    "streamed": "".join(pieces),
    "stream_finish": finish,
    "stream_usage": usage,
    "completion": done.choices[0].text,
    "missing": missing,
}))
"""


def test_the_openai_client_chats_and_completes_whole_and_streamed(gen: GenPlatform) -> None:
    result = run_client(CHAT, key=gen.tenant(), http=gen.http, model=MODEL)
    assert "Paris" in result["whole"] and result["whole"] == result["streamed"]
    assert result["whole_finish"] in ("stop", "length") and result["stream_finish"] == result["whole_finish"]
    assert result["whole_usage"] == result["stream_usage"]
    usage = result["whole_usage"]
    assert (
        usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
        and usage["prompt_tokens"] > 10
    )
    assert "Paris" in result["completion"]
    assert result["missing"] == 404


def test_a_token_limit_ends_an_sse_stream_as_a_length_finish_then_429(gen: GenPlatform) -> None:
    key = gen.tenant(QuotaLimits(tpm=60))  # the prompt bound (~36 tokens) fits, 300 more do not
    body = {"model": MODEL, "prompt": "Once upon a time, a ferryman", "max_tokens": 300, "stream": True}
    status, text = curl(gen, key, "/v1/completions", body)
    assert status == 200
    events = [line.removeprefix("data: ") for line in text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["object"] == "text_completion" and "".join(c["choices"][0]["text"] for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    status, text = curl(gen, key, "/v1/completions", body)
    assert status == 429
    assert json.loads(text)["error"]["code"] == "quota_exceeded"


def test_bad_chat_requests_are_400_naming_the_field(gen: GenPlatform) -> None:
    key = gen.tenant()
    status, text = curl(gen, key, "/v1/chat/completions", {"model": MODEL, "messages": [], "max_tokens": 4})
    assert status == 400 and "messages" in json.loads(text)["error"]["message"]
    bad_role = {"model": MODEL, "messages": [{"role": "root", "content": "x"}]}
    status, text = curl(gen, key, "/v1/chat/completions", bad_role)
    assert status == 400 and "role" in json.loads(text)["error"]["message"]
    status, _ = curl(gen, key, "/v1/completions", {"model": MODEL, "prompt": "hi", "n": 3})
    assert status == 400


RETRIED = """
import openai
client = openai.OpenAI(api_key=ARGS["key"], base_url=ARGS["http"] + "/v1", max_retries=0)
messages = [{"role": "user", "content": "Tell me a story about a ferryman."}]
key = {"Idempotency-Key": ARGS["id"]}
answers = [
    client.chat.completions.create(
        model=ARGS["model"], messages=messages, max_tokens=12, temperature=1.0, extra_headers=key
    )
    for _ in range(2)
]
print(json.dumps([[a.choices[0].message.content, a.usage.model_dump()] for a in answers]))
"""


@pytest.mark.abuse
def test_a_chat_retried_under_its_idempotency_key_gets_the_same_answer(gen: GenPlatform) -> None:
    """A sampled chat retried with the same Idempotency-Key is answered with the first
    answer (not a 409, not a new sample: the repeat is never run again)."""
    key = gen.tenant(QuotaLimits(tpm=100_000))
    first, again = run_client(RETRIED, key=key, http=gen.http, model=MODEL, id=f"chat-{uuid.uuid4().hex}")
    assert first == again
