"""Both job stores keep a job under the same stored names and read it back as it was: from
Redis's strings and from SQL's typed columns alike."""

from __future__ import annotations

import json

from ferryman_server.jobs.store import JobRecord, State, from_stored, stored

RECORD = JobRecord(
    tenant="acme",
    job_id="j1",
    model="minilm",
    version="1",
    state=State.RUNNING,
    total=3,
    succeeded=2,
    failed=1,
    cost_usd=0.25,
    created=1000.5,
    expires=2000.0,
    finished=0.0,
    digest="d" * 64,
    parameters={"normalize": "true"},
    price_per_item_usd=0.001,
    price_per_1k_tokens_usd=0.002,
)


def test_a_record_comes_back_from_typed_columns() -> None:
    columns = stored(RECORD)
    assert {"cost", "price", "price_1k"} <= columns.keys() and "cost_usd" not in columns
    assert columns["state"] == int(State.RUNNING)
    assert from_stored(columns) == RECORD


def test_a_record_comes_back_from_redis_strings() -> None:
    fields = {name: str(value) for name, value in stored(RECORD).items()}
    fields["parameters"] = json.dumps(RECORD.parameters)
    assert from_stored(fields) == RECORD


def test_counters_a_new_job_lacks_start_at_zero() -> None:
    fields = {k: v for k, v in stored(RECORD).items() if k not in {"succeeded", "failed", "cost", "finished"}}
    back = from_stored(fields)
    assert (back.succeeded, back.failed, back.cost_usd, back.finished) == (0, 0, 0.0, 0.0)
