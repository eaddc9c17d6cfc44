"""OpenAI's Batch API over durable jobs: an uploaded JSONL file of ``/v1/embeddings``
requests becomes one job's items, and its results become the output and error files."""

from __future__ import annotations

import asyncio
import email.parser
import email.policy
import functools
import json
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import grpc
import orjson

from ferryman.errors import Reason, status_code
from ferryman.tensors import decode
from ferryman.v1 import common_pb2, jobs_pb2
from ferryman_server.jobs.store import JobRecord
from ferryman_server.router.doors.http.caller import Caller
from ferryman_server.router.doors.http.errors import http_status
from ferryman_server.router.doors.openai.batches.protocol import (
    BATCH_PREFIX,
    ERRORS,
    FILE_PREFIX,
    META,
    OUTPUT,
    batch_object,
)
from ferryman_server.router.doors.openai.embeddings.protocol import EmbeddingRequest
from ferryman_server.router.doors.openai.embeddings.serving import texts
from ferryman_server.router.failures import RequestFailed, fail, invalid
from ferryman_server.router.jobs import JobDesk

EMBEDDINGS = "/v1/embeddings"

WINDOW = re.compile(r"^(\d{1,3})h$")

MAX_LIST = 100
OUTPUT_PAGE_ITEMS = 16
"""Items of a batch's output file read and formatted at a time (16 items of 32 texts'
384-float embeddings: ~4 MB of JSON)."""


def desk_of(caller: Caller) -> JobDesk:
    desk: JobDesk | None = caller.request.app.state.jobs
    if desk is None:
        raise fail(
            grpc.StatusCode.UNIMPLEMENTED, "this platform keeps no durable jobs", Reason.INVALID_REQUEST
        )
    return desk


def uploaded(body: bytes, content_type: str) -> tuple[str, str, bytes]:
    """(purpose, filename, content) of a multipart/form-data upload read whole (bounded)."""
    if not content_type.startswith("multipart/form-data"):
        raise invalid("body", "a multipart/form-data upload with 'file' and 'purpose'")
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body
    )
    fields: dict[str, tuple[str, bytes]] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if isinstance(name, str):
            payload = part.get_payload(decode=True)
            fields[name] = (part.get_filename() or "", payload if isinstance(payload, bytes) else b"")
    if "file" not in fields:
        raise invalid("file", "required")
    purpose = fields.get("purpose", ("", b"batch"))[1].decode(errors="replace").strip()
    if purpose != "batch":
        raise invalid("purpose", "only 'batch' files are kept")
    filename, content = fields["file"]
    return purpose, (filename or "input.jsonl")[:256], content


@dataclass(frozen=True)
class FileContent:
    """A file to send: its name, when it was made, and its bytes in chunks (a batch's output
    is never held whole: each chunk is made when the one before it has been sent)."""

    filename: str
    created: float
    chunks: Callable[[], AsyncIterator[bytes]]

    async def size(self) -> int:
        """Its length in bytes, counted chunk by chunk."""
        return sum([len(chunk) async for chunk in self.chunks()])


async def file_content(caller: Caller, file_id: str) -> FileContent:
    """An uploaded file, or a batch's output or error file."""
    desk = desk_of(caller)
    for suffix in (OUTPUT, ERRORS):
        if file_id.startswith(BATCH_PREFIX) and file_id.endswith(suffix):
            job = await desk.job(caller.tenant, file_id.removesuffix(suffix))
            return FileContent(
                f"{job.job_id}{suffix}.jsonl",
                job.finished or job.created,
                functools.partial(result_chunks, desk, caller, job, errors=suffix == ERRORS),
            )
    if not file_id.startswith(FILE_PREFIX):
        raise fail(grpc.StatusCode.NOT_FOUND, "no such file", Reason.UNKNOWN_REQUEST)
    stored = await desk.file(caller.tenant, file_id)

    async def whole() -> AsyncIterator[bytes]:
        yield stored.content  # an upload: bounded by the message size, and kept whole anyway

    return FileContent(stored.filename, stored.created, whole)


def items_of(caller: Caller, content: bytes) -> tuple[str, list[jobs_pb2.JobItem]]:
    """The batch's model and its items, from OpenAI batch input lines (the first bad line is
        named). Every line must call /v1/embeddings on the same model, which takes text; each
    line's input is read as the embeddings door reads it (texts or token arrays). Runs in a
    worker thread: it may load the token vocabulary."""
    model, items = "", []
    seen: set[str] = set()
    for number, raw in enumerate(content.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
            body, custom_id = line["body"], str(line["custom_id"])
            request = EmbeddingRequest.model_validate(body)
        except (ValueError, KeyError, TypeError, RecursionError):  # deep nesting: RecursionError
            raise invalid(f"line {number}", "not a batch request (custom_id, method, url, body)") from None
        if custom_id in seen:
            # Results are matched to requests by custom_id (OpenAI requires them unique).
            raise invalid(f"line {number}", "custom_id repeats an earlier line's")
        seen.add(custom_id)
        if line.get("url") != EMBEDDINGS:
            raise invalid(f"line {number}", f"only {EMBEDDINGS} requests are batched")
        if model and request.model != model:
            raise invalid(f"line {number}", "every request of a batch calls the same model")
        model = request.model
        try:
            values = texts(request)
        except RequestFailed as failed:
            raise invalid(f"line {number}", failed.status.message) from None
        items.append(
            jobs_pb2.JobItem(
                custom_id=custom_id, inputs=[common_pb2.NamedTensor(text=common_pb2.TextList(values=values))]
            )
        )
    if not items:
        raise invalid("input_file_id", "the file holds no requests")
    inputs = [
        spec for spec in caller.gateway.catalog.version(caller.tenant, model).schema.inputs if spec.text
    ]
    if len(inputs) != 1:
        raise invalid("model", f"{model} is not an embedding model (one text input)")
    for item in items:
        item.inputs[0].name = inputs[0].name
    return model, items


async def batch_of(desk: JobDesk, caller: Caller, job: JobRecord) -> dict[str, Any]:
    meta = json.loads((await desk.file(caller.tenant, job.job_id + META)).content)
    return batch_object(job, meta)


async def result_chunks(desk: JobDesk, caller: Caller, job: JobRecord, errors: bool) -> AsyncIterator[bytes]:
    """The batch's output (or error) file, OUTPUT_PAGE_ITEMS items at a time: read from the
    job store, then formatted in a worker thread (a page of embeddings is megabytes of JSON:
    on the event loop it would stall every other tenant's call)."""
    for offset in range(0, job.total, OUTPUT_PAGE_ITEMS):
        page = await desk.results(caller.tenant, job.job_id, offset, OUTPUT_PAGE_ITEMS)
        if chunk := await asyncio.to_thread(output_lines, job, page, errors):
            yield chunk


def output_lines(job: JobRecord, results: list[jobs_pb2.JobItemResult], errors: bool) -> bytes:
    """OpenAI batch output lines of ``results`` (the failed ones for the error file)."""
    lines: list[bytes] = []
    for result in results:
        failed = result.HasField("error")
        if failed != errors:
            continue
        line: dict[str, Any] = {"id": f"batch_req_{result.index}", "custom_id": result.custom_id}
        if failed:
            code = status_code(result.error)
            line["response"] = {"status_code": http_status(result.error), "body": {}}
            line["error"] = {"code": code.name.lower(), "message": result.error.message}
        else:
            rows = decode(result.outputs[0].tensor).astype("<f4").reshape(max(1, result.usage.items), -1)
            tokens = result.usage.input_tokens
            line["response"] = {
                "status_code": 200,
                "request_id": f"{job.job_id}/{result.index}",
                "body": {
                    "object": "list",
                    # float32 rows as they are: no Python float per value, each printed
                    # as the shortest text that reads back as the same float32.
                    "data": [
                        {"object": "embedding", "index": i, "embedding": row} for i, row in enumerate(rows)
                    ],
                    "model": job.model,
                    "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
                },
            }
            line["error"] = None
        lines.append(orjson.dumps(line, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n")
    return b"".join(lines)
