"""``ferryman serve router --workers N``: N router processes on one public port, so a many-core
host is not held to one event loop.

The first worker runs in this process; the others are children (``ferryman serve router``
with the same settings, restarted with backoff if they crash, stopped with it). Every worker
binds the public port and the HTTP doors with SO_REUSEPORT, deliberately and only within
this instance, and the kernel spreads connections over them. Quotas stay exact across
workers: with Redis or a quota server each worker uses it; otherwise the first worker's
in-memory Quota service is the only one, and the others call it on its internal port. Items
go to the configured batchers (a batcher in the router's process would split every model's
batches N ways). Worker i serves its metrics on the metrics port + i.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Callable

from ferryman_server.cli.supervisor import Platform
from ferryman_server.kernel.config import CommonSettings
from ferryman_server.kernel.net import check_listenable, free_port
from ferryman_server.quota.cohost import CoHostedQuota
from ferryman_server.quota.settings import QuotaSettings
from ferryman_server.router.server import serve_router
from ferryman_server.router.settings import RouterSettings

SUPERVISE_S = 0.5
"""How often crashed workers are looked for (and restarted after their backoff)."""


def offset(listen: str, index: int) -> str:
    """``host:port`` moved ``index`` ports up (empty and port 0 stay as they are)."""
    if not listen:
        return listen
    host, _, port = listen.rpartition(":")
    return listen if int(port) == 0 else f"{host}:{int(port) + index}"


def shared_quota(settings: RouterSettings, quota: QuotaSettings) -> RouterSettings:
    """The first worker's settings: when no shared backend is configured it serves its
    in-memory Quota service on an internal port (the one given, else a free local one)."""
    if settings.quota_address or quota.backend == "redis" or settings.internal_listen:
        return settings
    return settings.model_copy(update={"internal_listen": f"127.0.0.1:{free_port()}"})


def worker_env(first: RouterSettings, quota: QuotaSettings, index: int) -> dict[str, str]:
    """The environment of worker ``index`` (1 .. N-1): the first worker's settings, the port
    shared, its own metrics port, and the first worker's quotas unless they are shared."""
    values = first.model_dump()
    values.update(
        workers=1,
        reuse_port=True,
        internal_listen="",
        metrics_listen=offset(first.metrics_listen, index),
        quota_address=first.quota_address or ("" if quota.backend == "redis" else first.internal_listen),
    )
    env = {f"FERRYMAN_ROUTER_{name.upper()}": str(value) for name, value in values.items()}
    env.update({f"FERRYMAN_QUOTA_{name.upper()}": str(value) for name, value in quota.model_dump().items()})
    return env


def check_workers(settings: RouterSettings, local_batcher: bool) -> None:
    """Refuse what N workers cannot do, before anything starts."""
    if local_batcher:
        raise ValueError(
            "--workers share the configured batchers: a batcher in each router would split batches"
        )
    check_listenable(settings.listen)


async def serve_router_workers(
    settings: RouterSettings,
    quota: QuotaSettings,
    common: CommonSettings,
    log: Callable[[str], None] = lambda line: print(f"router workers: {line}", file=sys.stderr, flush=True),
) -> int:
    """Run ``settings.workers`` routers on one port until SIGTERM/SIGINT; see the module."""
    first = shared_quota(settings, quota).model_copy(update={"workers": 1, "reuse_port": True})
    children = Platform()
    supervising: asyncio.Task[None] | None = None

    async def supervise() -> None:
        while True:
            await asyncio.sleep(SUPERVISE_S)
            children.supervise(log)

    def started(address: str) -> None:
        nonlocal supervising
        for index in range(1, settings.workers):
            children.start_command(
                f"router-{index + 1}", ["serve", "router"], worker_env(first, quota, index)
            )
        supervising = asyncio.get_running_loop().create_task(supervise())
        log(f"{settings.workers} workers on {address}")

    try:
        return await serve_router(first, CoHostedQuota(quota), common, on_ready=started)
    finally:
        if supervising is not None:
            supervising.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await supervising
        await asyncio.to_thread(children.stop)
