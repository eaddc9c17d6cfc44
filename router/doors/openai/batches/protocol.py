"""OpenAI's Batch API objects: the batch request, and the file and batch objects it answers."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from ferryman_server.jobs.store import FINISHED, JobRecord, State
from ferryman_server.router.bounds import MAX_REQUEST_ID_CHARS

BATCH_PREFIX = "batch_"

FILE_PREFIX = "file-"

OUTPUT, ERRORS, META = "-output", "-errors", "-meta"

STATUS = {
    State.QUEUED: "in_progress",
    State.RUNNING: "in_progress",
    State.COMPLETED: "completed",
    State.CANCELLED: "cancelled",
    State.EXPIRED: "expired",
}

ENDED_AT = {State.COMPLETED: "completed_at", State.CANCELLED: "cancelled_at", State.EXPIRED: "expired_at"}

MAX_METADATA_KEY, MAX_METADATA_VALUE = 64, 512
"""OpenAI's bounds on a batch's metadata (at most 16 pairs)."""


class BatchRequest(BaseModel):
    input_file_id: str = Field(max_length=MAX_REQUEST_ID_CHARS)
    endpoint: str = Field(max_length=64)
    completion_window: str = Field(default="24h", max_length=8)
    metadata: dict[str, str] | None = Field(default=None, max_length=16)


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
