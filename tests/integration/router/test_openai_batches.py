"""OpenAI's Batch API with the real, unmodified openai client, on jobs in Redis and in the
registry database: a JSONL file of embedding requests uploaded, a batch created from it and
run by a job worker, its output file read back with every request answered once (the same
embedding /v1/embeddings gives, for text and for token arrays); another tenant finds
neither the file nor the batch; a bad file is refused naming its line; a cancelled batch
says so."""

from __future__ import annotations

import json

import bpe_openai
import numpy as np
import pytest
from job_helpers import Jobs, worker
from real_clients import run_client

TEXTS = [f"batch document {i} about rivers, boats and the sea" for i in range(12)]

BATCH = """
import io, time
import openai

client = openai.OpenAI(api_key=ARGS["key"], base_url=ARGS["http"] + "/v1", max_retries=0)
other = openai.OpenAI(api_key=ARGS["other"], base_url=ARGS["http"] + "/v1", max_retries=0)
url = "/v1/embeddings"
lines = [
    {"custom_id": f"doc-{i}", "method": "POST", "url": url, "body": {"model": "minilm", "input": t}}
    for i, t in enumerate(ARGS["texts"])
]
lines[3]["body"]["input"] = [ARGS["tokens"]]  # as LangChain sends it: cl100k_base ids
upload = client.files.create(
    file=("batch.jsonl", "\\n".join(json.dumps(l) for l in lines).encode()), purpose="batch"
)
batch = client.batches.create(input_file_id=upload.id, endpoint="/v1/embeddings", completion_window="24h")
first_status = batch.status
give_up = time.monotonic() + 120
while batch.status not in ("completed", "failed", "expired", "cancelled") and time.monotonic() < give_up:
    time.sleep(0.2)
    batch = client.batches.retrieve(batch.id)
output = client.files.content(batch.output_file_id).text if batch.output_file_id else ""
direct = client.embeddings.create(model="minilm", input=ARGS["texts"][3]).data[0].embedding
hidden = []
for call in (lambda: other.batches.retrieve(batch.id), lambda: other.files.content(upload.id)):
    try:
        call()
    except openai.NotFoundError:
        hidden.append(True)
bad = client.files.create(file=("bad.jsonl", (json.dumps(lines[0]) + "\\n{oops").encode()), purpose="batch")
try:
    client.batches.create(input_file_id=bad.id, endpoint="/v1/embeddings", completion_window="24h")
    refused = ""
except openai.BadRequestError as exc:
    refused = str(exc)
twice = client.files.create(
    file=("twice.jsonl", "\\n".join(json.dumps(l) for l in (lines[0], lines[0])).encode()), purpose="batch"
)
try:
    client.batches.create(input_file_id=twice.id, endpoint="/v1/embeddings", completion_window="24h")
    duplicate = ""
except openai.BadRequestError as exc:
    duplicate = str(exc)
nesting = b'{"custom_id": ' + b"[" * 100000 + b"]" * 100000 + b"}"
deep = client.files.create(file=("deep.jsonl", nesting), purpose="batch")
try:
    client.batches.create(input_file_id=deep.id, endpoint="/v1/embeddings", completion_window="24h")
    nested = ""
except openai.BadRequestError as exc:
    nested = str(exc)
try:
    client.batches.create(input_file_id=upload.id, endpoint="/v1/embeddings", completion_window="0h")
    zero = ""
except openai.BadRequestError as exc:
    zero = str(exc)
print(json.dumps({
    "first_status": first_status,
    "status": batch.status,
    "counts": [batch.request_counts.total, batch.request_counts.completed, batch.request_counts.failed],
    "input_file_id": batch.input_file_id == upload.id,
    "listed": batch.id in [b.id for b in client.batches.list()],
    "output": output,
    "direct": direct,
    "hidden": hidden,
    "refused": refused,
    "duplicate": duplicate,
    "zero": zero,
    "nested": nested,
}))
"""

# Run with no worker, so the batch cannot complete before the cancel arrives.
CANCEL = """
import openai

client = openai.OpenAI(api_key=ARGS["key"], base_url=ARGS["http"] + "/v1", max_retries=0)
body = {"model": "minilm", "input": "x"}
line = {"custom_id": "doc", "method": "POST", "url": "/v1/embeddings", "body": body}
upload = client.files.create(file=("pending.jsonl", json.dumps(line).encode()), purpose="batch")
pending = client.batches.create(input_file_id=upload.id, endpoint="/v1/embeddings", completion_window="24h")
cancelled = client.batches.cancel(pending.id)
print(json.dumps({"cancelled": cancelled.status, "retrieved": client.batches.retrieve(pending.id).status}))
"""


@pytest.mark.parametrize("store", ["redis", "registry"])
def test_a_batch_file_runs_with_the_real_openai_client(store: str, request: pytest.FixtureRequest) -> None:
    jobs: Jobs = request.getfixturevalue("jobs" if store == "redis" else "registry_jobs")
    other = jobs.e2e.keys["insider"]
    proc = worker(jobs)
    try:
        tokens = bpe_openai.get_encoding("cl100k_base").encode(TEXTS[3])
        out = run_client(
            BATCH, http=jobs.http, key=jobs.e2e.keys["acme"], other=other, texts=TEXTS, tokens=tokens
        )
    finally:
        proc.kill()
        proc.wait()
    cancel = run_client(CANCEL, http=jobs.http, key=jobs.e2e.keys["acme"])
    assert cancel == {"cancelled": "cancelled", "retrieved": "cancelled"}
    assert out["first_status"] == "in_progress" and out["status"] == "completed", out["status"]
    assert out["counts"] == [len(TEXTS), len(TEXTS), 0]
    assert out["input_file_id"] and out["listed"]
    lines = [json.loads(line) for line in out["output"].splitlines()]
    assert sorted(line["custom_id"] for line in lines) == sorted(f"doc-{i}" for i in range(len(TEXTS)))
    by_id = {line["custom_id"]: line for line in lines}
    answer = by_id["doc-3"]["response"]
    assert answer["status_code"] == 200 and by_id["doc-3"]["error"] is None
    embedding = answer["body"]["data"][0]["embedding"]  # of the line sent as token ids
    assert len(embedding) == 384
    np.testing.assert_allclose(embedding, out["direct"], rtol=1e-4, atol=1e-5)
    assert out["hidden"] == [True, True], "another tenant saw the batch or its file"
    assert "line 2" in out["refused"]
    assert "line 2" in out["duplicate"] and "custom_id" in out["duplicate"]
    assert "completion_window" in out["zero"], "a 0h window must not become 24 h"
    assert "line 1" in out["nested"], "deep nesting is a bad line, not a 500"
