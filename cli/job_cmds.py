"""``ferryman job``: durable jobs from the command line, through the SDK. Input lines are
JSON: ``{"custom_id": ..., "input": ...}`` (the value ``ferryman predict --input`` takes),
or OpenAI batch input lines (``{"custom_id": ..., "body": {"model": ..., "input": ...}}``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from google.protobuf.json_format import MessageToDict

from ferryman.sdk import Client, FerrymanError
from ferryman.sdk.client import endpoint
from ferryman.tensors import decode
from ferryman.v1 import jobs_pb2
from ferryman_server.cli.output import USD_PLACES, JsonFlag, emit, fail, table, usd

job_app = typer.Typer(help="Durable jobs: many requests, run in leftover capacity at the job price.")

Target = Annotated[str, typer.Option(help="Router address (env FERRYMAN_TARGET).")]
Key = Annotated[str, typer.Option(help="API key (env FERRYMAN_API_KEY).")]


def _client(target: str, key: str) -> Client:
    try:
        address, api_key = endpoint(target, key)
    except ValueError as exc:
        fail(str(exc))
    return Client(address, api_key, retries=0)


def _items(path: Path) -> tuple[str, list[tuple[str, Any]]]:
    """(the model the lines name, if any; (custom_id, input) per line)."""
    model, items = "", []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            fail(f"{path}:{n}: not JSON: {exc}")
        body = row.get("body", row) if isinstance(row, dict) else None
        if not isinstance(body, dict) or "input" not in body:
            fail(f"{path}:{n}: a line needs an input (or a body with one)")
        model = model or str(body.get("model", ""))
        items.append((str(row.get("custom_id", n - 1)), body["input"]))
    return model, items


def _view(job: jobs_pb2.Job) -> dict[str, Any]:
    view = MessageToDict(job, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)
    # A float of dollars summed item by item carries binary noise (6.000000000000001e-07).
    view["cost_usd"] = round(float(view.get("cost_usd", 0.0)), USD_PLACES)
    return view


def _show(jobs: list[jobs_pb2.Job], as_json: bool) -> None:
    views = [_view(j) for j in jobs]
    rows = [
        [
            v["job_id"],
            v["model"],
            v["state"].removeprefix("JOB_STATE_"),
            f"{v['succeeded']}+{v['failed']}/{v['total']}",
            usd(v["cost_usd"]),
        ]
        for v in views
    ]
    emit(
        views if len(views) != 1 else views[0],
        as_json,
        lambda: table("jobs", ["job", "model", "state", "done", "cost USD"], rows),
    )


@job_app.command("submit")
def job_submit(
    lines: Annotated[Path, typer.Argument(help="JSONL file, one item per line.")],
    model: Annotated[str, typer.Option(help="Model alias (default: the lines' body.model).")] = "",
    job_id: Annotated[str, typer.Option(help="Your id for the job: a retry with it is the same job.")] = "",
    version: Annotated[str, typer.Option(help="Pin a version.")] = "",
    target: Target = "",
    key: Key = "",
    as_json: JsonFlag = False,
) -> None:
    """Queue a job from a JSONL file."""
    named, items = _items(lines)
    if not (model or named):
        fail("name the model (--model, or body.model in the lines)")
    with _client(target, key) as client:
        try:
            job = client.jobs.submit(model or named, items, job_id=job_id or None, version=version or None)
        except FerrymanError as exc:
            fail(str(exc))
    _show([job], as_json)


@job_app.command("status")
def job_status(job_id: str, target: Target = "", key: Key = "", as_json: JsonFlag = False) -> None:
    """A job's state and progress."""
    with _client(target, key) as client:
        try:
            _show([client.jobs.get(job_id)], as_json)
        except FerrymanError as exc:
            fail(str(exc))


@job_app.command("list")
def job_list(target: Target = "", key: Key = "", as_json: JsonFlag = False) -> None:
    """Your newest jobs."""
    with _client(target, key) as client:
        try:
            _show(client.jobs.list(), as_json)
        except FerrymanError as exc:
            fail(str(exc))


@job_app.command("cancel")
def job_cancel(job_id: str, target: Target = "", key: Key = "", as_json: JsonFlag = False) -> None:
    """Stop a job: what has not run never runs and is not charged."""
    with _client(target, key) as client:
        try:
            _show([client.jobs.cancel(job_id)], as_json)
        except FerrymanError as exc:
            fail(str(exc))


@job_app.command("results")
def job_results(job_id: str, target: Target = "", key: Key = "") -> None:
    """Every recorded result as a JSON line: custom_id, outputs or error."""
    with _client(target, key) as client:
        try:
            for result in client.jobs.results(job_id):
                line: dict[str, Any] = {"index": result.index, "custom_id": result.custom_id}
                if result.HasField("error"):
                    line["error"] = {"code": result.error.code, "message": result.error.message}
                else:
                    line["outputs"] = {
                        o.name: decode(o.tensor).tolist()
                        if o.WhichOneof("value") == "tensor"
                        else list(o.text.values)
                        for o in result.outputs
                    }
                sys.stdout.write(json.dumps(line) + "\n")
        except FerrymanError as exc:
            fail(str(exc))
