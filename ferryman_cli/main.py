"""Entry point of the ``ferryman`` console script."""

from __future__ import annotations

from typing import Annotated

import typer

from ferryman import __version__
from ferryman_cli.admin_cmd import admin_app
from ferryman_cli.bench_cmd import bench
from ferryman_cli.canary_cmd import canary
from ferryman_cli.generate_cmd import generate
from ferryman_cli.job_cmds import job_app
from ferryman_cli.models_cmds import models_app
from ferryman_cli.output import say_error
from ferryman_cli.predict_cmd import predict
from ferryman_cli.registry_cmds import db_app, key_app, model_app, quota_app, tenant_app
from ferryman_cli.rollout_cmds import experiment_app, rollout_app
from ferryman_cli.route_cmds import route_app
from ferryman_cli.serve_cmds import serve_app
from ferryman_cli.top_cmd import top
from ferryman_cli.up import up

REASON_CHARS = 200
"""Most of a driver's error message an error line repeats."""

app = typer.Typer(
    name="ferryman",
    help="Ferryman: a gRPC-native, multi-tenant inference platform.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(db_app, name="db")
app.add_typer(tenant_app, name="tenant")
app.add_typer(key_app, name="key")
app.add_typer(quota_app, name="quota")
app.add_typer(model_app, name="model")
app.add_typer(route_app, name="route")
app.add_typer(rollout_app, name="rollout")
app.add_typer(experiment_app, name="experiment")
app.add_typer(job_app, name="job")
app.add_typer(models_app, name="models")
app.add_typer(serve_app, name="serve")
app.add_typer(admin_app, name="admin")
app.command("up")(up)
app.command("predict")(predict)
app.command("generate")(generate)
app.command("top")(top)
app.command("canary")(canary)
app.command("bench")(bench)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"ferryman {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    """Ferryman: a gRPC-native, multi-tenant inference platform."""


def run() -> None:
    """The console script: the app, with a registry database that cannot be reached (down,
    refusing, wrong URL) answered in one line instead of a traceback."""
    from sqlalchemy.exc import OperationalError

    try:
        app()
    except OperationalError as exc:
        lines = str(exc.orig or exc).strip().splitlines()
        say_error(f"the registry database cannot be reached: {clip_reason(lines[0] if lines else repr(exc))}")
        raise SystemExit(1) from None


def clip_reason(reason: str, limit: int = REASON_CHARS) -> str:
    return reason if len(reason) <= limit else reason[:limit] + "…"
