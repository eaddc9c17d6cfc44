"""OpenAI's Batch API over durable jobs (``/v1/files``, ``/v1/batches``): a tenant uploads a
JSONL file of ``/v1/embeddings`` requests, creates a batch from it, and reads the batch's
output file once it has run. A batch is a job (its id the job id; ``router.jobs.JobDesk``
checks, prices and queues it like any job), its input and description are files the
tenant alone can read, and its output and error files are made from the job's results when
asked for. Every id is the tenant's own: another tenant's id finds nothing."""

from __future__ import annotations

import asyncio
import email.parser
import email.policy
import json
import re
import uuid
from datetime import timedelta
from typing import Annotated, Any

import grpc
from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, Field

from ferryman.errors import Reason, status_code
from ferryman.tensors import decode
from ferryman.v1 import common_pb2, jobs_pb2
from ferryman_jobs.store import FINISHED, JobRecord, State
from router.bounds import MAX_REQUEST_ID_CHARS
from router.doors.http.caller import JSON, Authenticated, Caller, json_body, parse_json, read_body
from router.doors.http.errors import http_status
from router.doors.http.openai import invalid
from router.failures import fail
from router.jobs import MAX_RESULTS, JobDesk

router = APIRouter(prefix="/v1", tags=["OpenAI-compatible batches"])
EMBEDDINGS = "/v1/embeddings"
BATCH_PREFIX = "batch_"
FILE_PREFIX = "file-"
OUTPUT, ERRORS, META = "-output", "-errors", "-meta"
WINDOW = re.compile(r"^(\d{1,3})h$")
STATUS = {
    State.QUEUED: "in_progress",
    State.RUNNING: "in_progress",
    State.COMPLETED: "completed",
    State.CANCELLED: "cancelled",
    State.EXPIRED: "expired",
}
ENDED_AT = {State.COMPLETED: "completed_at", State.CANCELLED: "cancelled_at", State.EXPIRED: "expired_at"}
MAX_LIST = 100
MAX_METADATA_KEY, MAX_METADATA_VALUE = 64, 512
"""OpenAI's bounds on a batch's metadata (at most 16 pairs)."""


class BatchRequest(BaseModel):
    input_file_id: str = Field(max_length=MAX_REQUEST_ID_CHARS)
    endpoint: str = Field(max_length=64)
    completion_window: str = Field(default="24h", max_length=8)
    metadata: dict[str, str] | None = Field(default=None, max_length=16)


def desk_of(caller: Caller) -> JobDesk:
    desk: JobDesk | None = caller.request.app.state.jobs
    if desk is None:
        raise fail(
            grpc.StatusCode.UNIMPLEMENTED, "this platform keeps no durable jobs", Reason.INVALID_REQUEST
        )
    return desk


def file_object(file_id: str, filename: str, size: int, created: float, purpose: str) -> dict[str, Any]:
    return {
        "id": file_id,
        "object": "file",
        "bytes": size,
        "created_at": int(created),
        "filename": filename,
        "purpose": purpose,
        "status": "processed",
    }


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


@router.post("/files", summary="Upload a batch input file (JSONL of /v1/embeddings requests).")
async def create_file(caller: Authenticated) -> Response:
    desk = desk_of(caller)
    body = await read_body(caller.request, caller.gateway.max_message_bytes)
    purpose, filename, content = uploaded(body, caller.request.headers.get("content-type", ""))
    stored = await desk.put_file(caller.tenant, FILE_PREFIX + uuid.uuid4().hex, filename, content)
    return JSON(file_object(stored.file_id, stored.filename, len(content), stored.created, purpose))


async def file_content(caller: Caller, file_id: str) -> tuple[str, float, bytes]:
    """(filename, created, content) of an uploaded file or a batch's output or error file."""
    desk = desk_of(caller)
    for suffix in (OUTPUT, ERRORS):
        if file_id.startswith(BATCH_PREFIX) and file_id.endswith(suffix):
            job = await desk.job(caller.tenant, file_id.removesuffix(suffix))
            lines = await result_lines(desk, caller, job, errors=suffix == ERRORS)
            return f"{job.job_id}{suffix}.jsonl", job.finished or job.created, lines
    if not file_id.startswith(FILE_PREFIX):
        raise fail(grpc.StatusCode.NOT_FOUND, "no such file", Reason.UNKNOWN_REQUEST)
    stored = await desk.file(caller.tenant, file_id)
    return stored.filename, stored.created, stored.content


@router.get("/files/{file_id}", summary="A file's description.")
async def get_file(caller: Authenticated, file_id: str) -> Response:
    filename, created, content = await file_content(caller, file_id[:MAX_REQUEST_ID_CHARS])
    purpose = "batch" if file_id.startswith(FILE_PREFIX) else "batch_output"
    return JSON(file_object(file_id, filename, len(content), created, purpose))


@router.get("/files/{file_id}/content", summary="A file's content.")
async def get_file_content(caller: Authenticated, file_id: str) -> Response:
    _, _, content = await file_content(caller, file_id[:MAX_REQUEST_ID_CHARS])
    return Response(content, media_type="application/jsonl")


def items_of(caller: Caller, content: bytes) -> tuple[str, list[jobs_pb2.JobItem]]:
    """The batch's model and its items, from OpenAI batch input lines (the first bad line is
    named). Every line must call /v1/embeddings on the same model, which takes text."""
    model, items = "", []
    for number, raw in enumerate(content.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
            body, custom_id = line["body"], str(line["custom_id"])
            text = body["input"]
        except (ValueError, KeyError, TypeError):
            raise invalid(f"line {number}", "not a batch request (custom_id, method, url, body)") from None
        if line.get("url") != EMBEDDINGS:
            raise invalid(f"line {number}", f"only {EMBEDDINGS} requests are batched")
        if model and body.get("model") != model:
            raise invalid(f"line {number}", "every request of a batch calls the same model")
        model = str(body.get("model", ""))
        texts = [text] if isinstance(text, str) else text
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            raise invalid(f"line {number}", "input: text, or a list of texts")
        items.append(
            jobs_pb2.JobItem(
                custom_id=custom_id, inputs=[common_pb2.NamedTensor(text=common_pb2.TextList(values=texts))]
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


def batch_object(job: JobRecord, meta: dict[str, Any]) -> dict[str, Any]:
    batch: dict[str, Any] = {
        "id": job.job_id,
        "object": "batch",
        "endpoint": meta["endpoint"],
        "input_file_id": meta["input_file_id"],
        "completion_window": meta["completion_window"],
        "status": STATUS[job.state],
        "created_at": int(job.created),
        "in_progress_at": int(job.created),
        "expires_at": int(job.expires),
        "request_counts": {"total": job.total, "completed": job.succeeded, "failed": job.failed},
        "metadata": meta.get("metadata"),
        "output_file_id": job.job_id + OUTPUT if job.state in FINISHED and job.succeeded else None,
        "error_file_id": job.job_id + ERRORS if job.state in FINISHED and job.failed else None,
    }
    if job.state in ENDED_AT:
        batch[ENDED_AT[job.state]] = int(job.finished)
    return batch


async def batch_of(desk: JobDesk, caller: Caller, job: JobRecord) -> dict[str, Any]:
    meta = json.loads((await desk.file(caller.tenant, job.job_id + META)).content)
    return batch_object(job, meta)


@router.post(
    "/batches",
    summary="Run a file's requests as a batch (a durable job).",
    openapi_extra=json_body("BatchRequest"),
)
async def create_batch(caller: Authenticated) -> Response:
    desk = desk_of(caller)
    request = parse_json(BatchRequest, await read_body(caller.request, caller.gateway.max_message_bytes))
    if request.endpoint != EMBEDDINGS:
        raise invalid("endpoint", f"only {EMBEDDINGS} is batched")
    for key, value in (request.metadata or {}).items():
        if len(key) > MAX_METADATA_KEY or len(value) > MAX_METADATA_VALUE:
            raise invalid(
                "metadata", f"keys of at most {MAX_METADATA_KEY} characters, values {MAX_METADATA_VALUE}"
            )
    window = WINDOW.match(request.completion_window)
    if window is None:
        raise invalid("completion_window", "hours, such as '24h'")
    if not request.input_file_id.startswith(FILE_PREFIX):
        raise fail(grpc.StatusCode.NOT_FOUND, "no such file", Reason.UNKNOWN_REQUEST)
    content = (await desk.file(caller.tenant, request.input_file_id)).content
    # Up to the body limit of JSON lines: parsed off the event loop, which serves everyone.
    model, items = await asyncio.to_thread(items_of, caller, content)
    batch_id = BATCH_PREFIX + uuid.uuid4().hex
    meta = request.model_dump(exclude_none=True)
    await desk.put_file(caller.tenant, batch_id + META, "batch.json", json.dumps(meta).encode())
    submit = jobs_pb2.SubmitJobRequest(job_id=batch_id, model=model, items=items)
    submit.completion_window.FromTimedelta(timedelta(hours=int(window.group(1))))
    await desk.submit(caller.tenant, submit)
    return JSON(await batch_of(desk, caller, await desk.job(caller.tenant, batch_id)))


@router.get("/batches/{batch_id}", summary="A batch, with its progress.")
async def get_batch(caller: Authenticated, batch_id: str) -> Response:
    desk = desk_of(caller)
    return JSON(await batch_of(desk, caller, await desk.job(caller.tenant, batch_id[:MAX_REQUEST_ID_CHARS])))


@router.post("/batches/{batch_id}/cancel", summary="Cancel a batch: what has not run never runs.")
async def cancel_batch(caller: Authenticated, batch_id: str) -> Response:
    desk = desk_of(caller)
    await desk.cancel(caller.tenant, batch_id[:MAX_REQUEST_ID_CHARS])
    return JSON(await batch_of(desk, caller, await desk.job(caller.tenant, batch_id)))


@router.get("/batches", summary="The tenant's batches, newest first.")
async def list_batches(
    caller: Authenticated, limit: Annotated[int, Query(ge=1, le=MAX_LIST)] = 20, after: str = ""
) -> Response:
    desk = desk_of(caller)
    page = await desk.jobs(caller.tenant, jobs_pb2.ListJobsRequest(page_size=MAX_LIST, page_token=after))
    batches = [
        await batch_of(desk, caller, await desk.job(caller.tenant, j.job_id))
        for j in page.jobs
        if j.job_id.startswith(BATCH_PREFIX)
    ][:limit]
    return JSON(
        {
            "object": "list",
            "data": batches,
            "first_id": batches[0]["id"] if batches else None,
            "last_id": batches[-1]["id"] if batches else None,
            "has_more": bool(page.next_page_token),
        }
    )


async def result_lines(desk: JobDesk, caller: Caller, job: JobRecord, errors: bool) -> bytes:
    """The batch's output (or error) file: one OpenAI batch output line per item."""
    lines: list[bytes] = []
    for offset in range(0, job.total, MAX_RESULTS):
        for result in await desk.results(caller.tenant, job.job_id, offset, MAX_RESULTS):
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
                        "data": [
                            {"object": "embedding", "index": i, "embedding": r}
                            for i, r in enumerate(rows.tolist())
                        ],
                        "model": job.model,
                        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
                    },
                }
                line["error"] = None
            lines.append(json.dumps(line).encode())
    return b"\n".join(lines) + (b"\n" if lines else b"")
