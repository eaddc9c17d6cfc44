"""Jobs in the tenant's daily spend: what a job's items cost (``ferryman_server.jobs``, recorded by
the batchers' workers) is charged to the tenant's quota, so a daily cost limit holds for
jobs (and requests spilled into them) as for real-time requests.

Every router runs the loop: it reads jobs whose cost grew (``JobStore.uncharged``) and
charges each job's total under the job's own account (``job/<tenant>/<job id>``): the quota
adds only what it had not charged before, so routers racing, a router dying between two
steps, or a charge repeated after an outage never count a dollar twice. A job whose tenant
reaches a hard daily cost limit is cancelled: what it has not run is never run nor charged.
A new job (or spill) of a tenant at its limit is refused."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import redis.asyncio as aioredis

from ferryman_server.jobs.port import JobQueue
from ferryman_server.jobs.store import FINISHED, State
from ferryman_server.kernel.quota import QuotaClient, QuotaUnavailable
from ferryman_server.router.settings import RouterSettings

log = logging.getLogger("ferryman.router.jobs")


def account(tenant: str, job_id: str) -> str:
    """The quota account a job's cost is charged under."""
    return f"job/{tenant}/{job_id}"


class JobCharges:
    """Charges job cost to tenants' spend; tells whether a tenant may start a job."""

    def __init__(self, settings: RouterSettings, store: JobQueue, quota: QuotaClient) -> None:
        self._settings = settings
        self._store = store
        self._quota = quota

    async def at_limit(self, tenant: str, model: str, job_id: str) -> bool:
        """Whether the tenant has reached a hard daily cost limit (a charge of nothing)."""
        _, over = await self._quota.charge(
            account(tenant, job_id), tenant, model, 0.0, self._settings.quota_timeout_s
        )
        return over

    async def run(self, stop: asyncio.Event) -> None:
        """Charge what jobs cost every ``job_charge_every_s``, until ``stop``."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self._settings.job_charge_every_s)
            try:
                await self.charge_once()
            except (OSError, aioredis.RedisError, QuotaUnavailable) as exc:
                log.warning("charging job cost failed; tried again next time: %s", exc)

    async def charge_once(self) -> int:
        """One pass over the jobs whose cost grew; returns how many were charged in full."""
        done = 0
        for key, job in await self._store.uncharged(self._settings.job_charge_batch):
            if job is None:
                await self._store.charged(key)  # gone (its retention ended): nothing left to charge
                continue
            _, over = await self._quota.charge(
                account(job.tenant, job.job_id),
                job.tenant,
                job.model,
                job.cost_usd,
                self._settings.quota_timeout_s,
            )
            if over and job.state not in FINISHED:
                log.info(
                    "job %s of %s cancelled: the tenant's daily cost limit is reached", job.job_id, job.tenant
                )
                await self._store.finish(job.tenant, job.job_id, State.CANCELLED)
                continue  # its last items may still be recorded: charged on the next pass
            if job.state in FINISHED:
                await self._store.charged(key)
                done += 1
        return done
