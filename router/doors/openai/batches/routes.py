"""OpenAI's Batch API routes (``/v1/files``, ``/v1/batches``) over the router's durable jobs."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import timedelta
from typing import Annotated

import grpc
from fastapi import APIRouter, Query, Response
from fastapi.responses import StreamingResponse

from ferryman.errors import Reason
from ferryman.v1 import jobs_pb2
from ferryman_server.router.bounds import MAX_REQUEST_ID_CHARS
from ferryman_server.router.doors.http.caller import JSON, Authenticated, json_body, parse_json, read_body
from ferryman_server.router.doors.openai.batches.protocol import (
    BATCH_PREFIX,
    FILE_PREFIX,
    MAX_METADATA_KEY,
    MAX_METADATA_VALUE,
    META,
    BatchRequest,
    file_object,
)
from ferryman_server.router.doors.openai.batches.serving import (
    EMBEDDINGS,
    MAX_LIST,
    WINDOW,
    batch_of,
    desk_of,
    file_content,
    items_of,
    uploaded,
)
from ferryman_server.router.failures import fail, invalid

router = APIRouter(prefix="/v1", tags=["OpenAI-compatible batches"])


@router.post("/files", summary="Upload a batch input file (JSONL of /v1/embeddings requests).")
async def create_file(caller: Authenticated) -> Response:
    desk = desk_of(caller)
    body = await read_body(caller.request, caller.gateway.max_message_bytes)
    # Parsing a multipart upload of many megabytes is CPU work: off the event loop.
    purpose, filename, content = await asyncio.to_thread(
        uploaded, body, caller.request.headers.get("content-type", "")
    )
    stored = await desk.put_file(caller.tenant, FILE_PREFIX + uuid.uuid4().hex, filename, content)
    return JSON(file_object(stored.file_id, stored.filename, len(content), stored.created, purpose))


@router.get("/files/{file_id}", summary="A file's description.")
async def get_file(caller: Authenticated, file_id: str) -> Response:
    content = await file_content(caller, file_id[:MAX_REQUEST_ID_CHARS])
    purpose = "batch" if file_id.startswith(FILE_PREFIX) else "batch_output"
    return JSON(file_object(file_id, content.filename, await content.size(), content.created, purpose))


@router.get("/files/{file_id}/content", summary="A file's content.")
async def get_file_content(caller: Authenticated, file_id: str) -> Response:
    content = await file_content(caller, file_id[:MAX_REQUEST_ID_CHARS])
    # Sent as it is made, a page at a time, each after the one before has gone out.
    return StreamingResponse(content.chunks(), media_type="application/jsonl")


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
    if window is None or int(window.group(1)) < 1:
        # "0h" would be no window at all, which a job reads as the default (24 h).
        raise invalid("completion_window", "hours, at least 1, such as '24h'")
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
