"""Jobs: a tenant's durable jobs with their progress and cost, the queue's backlog, and
cancel (what has not run never runs nor is charged)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import streamlit as st

from ferryman_server.admin_ui.context import Console
from ferryman_server.jobs.port import JobQueue, open_job_queue
from ferryman_server.jobs.store import FINISHED, JobRecord, State
from ferryman_server.registry.accounts import Permission

T = TypeVar("T")
PAGE = 200
"""A tenant's newest jobs shown."""


def with_store(ctx: Console, call: Callable[[JobQueue], Awaitable[T]]) -> T | None:
    """``call`` on the platform's job store, opened for it and closed after (Streamlit runs
    each page in its own thread and event loop: nothing async outlives the call); None
    when the platform keeps no jobs."""

    async def run() -> T | None:
        store = open_job_queue(ctx.common, ctx.settings.jobs_timeout_s)
        if store is None:
            return None
        try:
            return await call(store)
        finally:
            await store.close()

    return asyncio.run(run())


def row(job: JobRecord) -> dict[str, object]:
    done = job.succeeded + job.failed
    return {
        "job": job.job_id,
        "model": f"{job.model}:{job.version}",
        "state": job.state.name.lower(),
        "progress": done / job.total if job.total else 0.0,
        "succeeded": job.succeeded,
        "failed": job.failed,
        "total": job.total,
        "cost (USD)": round(job.cost_usd, 6),
        "created": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(job.created)),
    }


def render(ctx: Console) -> None:
    st.header("Jobs")
    backlog = with_store(ctx, lambda store: store.backlog())
    if backlog is None:
        st.info(
            "This platform keeps no durable jobs (set FERRYMAN_JOBS_REDIS_URL, or FERRYMAN_JOBS_IN_REGISTRY)."
        )
        return
    items, oldest_s = backlog
    cols = st.columns(2)
    cols[0].metric("Items waiting", items)
    cols[1].metric("Oldest waiting", f"{oldest_s:.0f} s")
    tenants = [t.name for t in ctx.reader.tenants()]
    if not tenants:
        st.info("No tenants yet.")
        return
    tenant = st.selectbox("Tenant", tenants, key="jobs_tenant")
    jobs = with_store(ctx, lambda store: store.jobs(tenant, PAGE)) or []
    if not jobs:
        st.caption("No jobs.")
        return
    st.dataframe(
        [row(job) for job in jobs],
        hide_index=True,
        width="stretch",
        column_config={"progress": st.column_config.ProgressColumn("progress", min_value=0.0, max_value=1.0)},
    )
    unfinished = [job.job_id for job in jobs if job.state not in FINISHED]
    if not unfinished or not ctx.can(Permission.OPERATE):
        return
    with st.form("cancel_job"):
        job_id = st.selectbox("Unfinished job", unfinished, key="cancel_job_id")
        if st.form_submit_button("Cancel", key="cancel_job_submit"):
            ctx.require(Permission.OPERATE)
            ended = with_store(ctx, lambda store: store.finish(tenant, job_id, State.CANCELLED))
            if ended is not None and ended.state == State.CANCELLED:
                st.success(
                    f"Job {job_id} cancelled: {ended.succeeded + ended.failed} of {ended.total} items ran."
                )
            else:
                st.warning(f"Job {job_id} had already ended.")
