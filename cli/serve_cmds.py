"""Commands that run services: ``ferryman serve node`` (more as services land)."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Annotated, Any, NoReturn

import typer
import uvloop

from ferryman_server.cli.context import settings
from ferryman_server.cli.output import fail
from ferryman_server.kernel.logs import configure_logging

serve_app = typer.Typer(help="Run one service (the Kubernetes path).", no_args_is_help=True)


def _overrides(**values: Any) -> dict[str, Any]:
    """CLI flags that were given; they override the service's environment settings."""
    return {key: value for key, value in values.items() if value is not None}


def _serve(main: Coroutine[Any, Any, int]) -> NoReturn:
    """Run a service to its exit code; a port it cannot bind, or a setting it cannot use
    (a ValueError while it starts, e.g. a batcher address without a port), is a one-line error."""
    try:
        code = uvloop.run(main)
    except (OSError, ValueError) as exc:
        fail(str(exc))
    raise typer.Exit(code)


def _configure_logging() -> None:
    configure_logging(settings().log_level)


@serve_app.command("node")
def serve_node_cmd(
    listen: Annotated[str | None, typer.Option(help="host:port to bind.")] = None,
    device: Annotated[str | None, typer.Option(help="auto, cpu or cuda:N.")] = None,
    name: Annotated[str | None, typer.Option(help="Node name in the registry.")] = None,
    advertise: Annotated[str | None, typer.Option(help="Address others dial.")] = None,
    capacity: Annotated[int | None, typer.Option(help="Batches run at once.")] = None,
    use_registry: Annotated[
        bool | None, typer.Option("--registry/--no-registry", help="Register and load placements.")
    ] = None,
    metrics_listen: Annotated[str | None, typer.Option(help="host:port for /metrics.")] = None,
) -> None:
    """Run a node: load its placed versions and serve the Node service."""
    from ferryman_server.gpu_node.server import serve_node
    from ferryman_server.gpu_node.settings import NodeSettings

    _configure_logging()
    node_settings = NodeSettings(
        **_overrides(
            listen=listen,
            device=device,
            name=name,
            advertise=advertise,
            capacity=capacity,
            use_registry=use_registry,
            metrics_listen=metrics_listen,
        )
    )
    _serve(serve_node(node_settings, settings()))


@serve_app.command("batcher")
def serve_batcher_cmd(
    listen: Annotated[str | None, typer.Option(help="host:port to bind.")] = None,
    metrics_listen: Annotated[str | None, typer.Option(help="host:port for /metrics.")] = None,
) -> None:
    """Run a batcher: queues, scheduler, coalescing, dispatch to nodes."""
    from ferryman_server.batcher.server import serve_batcher
    from ferryman_server.batcher.settings import BatcherSettings

    _configure_logging()
    batcher_settings = BatcherSettings(**_overrides(listen=listen, metrics_listen=metrics_listen))
    _serve(serve_batcher(batcher_settings, settings()))


@serve_app.command("router")
def serve_router_cmd(
    listen: Annotated[str | None, typer.Option(help="host:port to bind.")] = None,
    batchers: Annotated[str | None, typer.Option(help="Comma-separated batcher addresses.")] = None,
    quota_address: Annotated[str | None, typer.Option(help="Quota server; empty hosts it here.")] = None,
    redis_url: Annotated[str | None, typer.Option(help="Use Redis for in-process quotas.")] = None,
    metrics_listen: Annotated[str | None, typer.Option(help="host:port for /metrics.")] = None,
    internal_listen: Annotated[
        str | None, typer.Option(help="host:port serving the in-process Quota service to services.")
    ] = None,
    local_batcher: Annotated[
        bool, typer.Option(help="Run the batcher in this process (FERRYMAN_BATCHER_* settings).")
    ] = False,
    http_listen: Annotated[
        str | None, typer.Option(help="host:port of the HTTP doors (OIP REST /v2, OpenAI /v1).")
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(help="Router processes sharing the port (SO_REUSEPORT), one event loop each."),
    ] = None,
) -> None:
    """Run a router: the public Inference and OIP v2 gRPC services on --listen, the HTTP doors
    on --http-listen (and quotas, unless --quota-address)."""
    from ferryman_server.batcher.settings import BatcherSettings
    from ferryman_server.cli.cohost import serve_router_with_batcher
    from ferryman_server.quota.cohost import CoHostedQuota
    from ferryman_server.quota.settings import QuotaSettings
    from ferryman_server.router.server import serve_router
    from ferryman_server.router.settings import RouterSettings

    _configure_logging()
    router_settings = RouterSettings(
        **_overrides(
            listen=listen,
            batchers=batchers,
            quota_address=quota_address,
            metrics_listen=metrics_listen,
            internal_listen=internal_listen,
            http_listen=http_listen,
            workers=workers,
        )
    )
    quota_settings = QuotaSettings(**_overrides(redis_url=redis_url, backend="redis" if redis_url else None))
    if router_settings.workers > 1:
        from ferryman_server.cli.workers import check_workers, serve_router_workers

        try:
            check_workers(router_settings, local_batcher)
        except (OSError, ValueError) as exc:
            fail(str(exc))
        _serve(serve_router_workers(router_settings, quota_settings, settings()))
    if local_batcher:
        _serve(serve_router_with_batcher(router_settings, quota_settings, BatcherSettings(), settings()))
    _serve(serve_router(router_settings, CoHostedQuota(quota_settings), settings()))


@serve_app.command("quota")
def serve_quota_cmd(
    listen: Annotated[str | None, typer.Option(help="host:port to bind.")] = None,
    redis_url: Annotated[str | None, typer.Option(help="Redis URL (memory backend without it).")] = None,
    metrics_listen: Annotated[str | None, typer.Option(help="host:port for /metrics.")] = None,
) -> None:
    """Run the Quota service on its own."""
    from ferryman_server.quota.server import serve_quota
    from ferryman_server.quota.settings import QuotaSettings

    _configure_logging()
    quota_settings = QuotaSettings(
        **_overrides(
            listen=listen,
            redis_url=redis_url,
            backend="redis" if redis_url else None,
            metrics_listen=metrics_listen,
        )
    )
    _serve(serve_quota(quota_settings, settings()))


@serve_app.command("rollouts")
def serve_rollouts_cmd(
    router_metrics: Annotated[
        list[str] | None, typer.Option(help="A router's /metrics URL (repeat for each router).")
    ] = None,
    prometheus_url: Annotated[
        str | None, typer.Option(help="A Prometheus scraping every router, read instead.")
    ] = None,
    listen: Annotated[str | None, typer.Option(help="host:port of its health service.")] = None,
    metrics_listen: Annotated[str | None, typer.Option(help="host:port for /metrics.")] = None,
    check_s: Annotated[float | None, typer.Option(help="Seconds between checks of each rollout.")] = None,
) -> None:
    """Run the rollout controller: steps each rollout's weights as its analysis allows."""
    from ferryman_server.rollouts.server import serve_rollouts
    from ferryman_server.rollouts.settings import RolloutSettings

    _configure_logging()
    rollout_settings = RolloutSettings(
        **_overrides(
            router_metrics=router_metrics or None,
            prometheus_url=prometheus_url,
            listen=listen,
            metrics_listen=metrics_listen,
            check_s=check_s,
        )
    )
    _serve(serve_rollouts(rollout_settings, settings()))
