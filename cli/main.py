"""Entry point of the ``ferryman`` console script."""

from __future__ import annotations

import importlib
from typing import Annotated

import typer
from typer import _click as click  # typer 0.29 vendors click: its commands are these
from typer.core import TyperGroup

from ferryman import __version__
from ferryman_server.cli.output import say_error

REASON_CHARS = 200
"""Most of a driver's error message an error line repeats."""

COMMANDS: dict[str, str] = {
    "db": "ferryman_server.cli.registry_cmds:db_app",
    "tenant": "ferryman_server.cli.registry_cmds:tenant_app",
    "key": "ferryman_server.cli.registry_cmds:key_app",
    "quota": "ferryman_server.cli.registry_cmds:quota_app",
    "model": "ferryman_server.cli.registry_cmds:model_app",
    "route": "ferryman_server.cli.route_cmds:route_app",
    "rollout": "ferryman_server.cli.rollout_cmds:rollout_app",
    "experiment": "ferryman_server.cli.rollout_cmds:experiment_app",
    "job": "ferryman_server.cli.job_cmds:job_app",
    "models": "ferryman_server.cli.models_cmds:models_app",
    "serve": "ferryman_server.cli.serve_cmds:serve_app",
    "admin": "ferryman_server.cli.admin_cmd:admin_app",
    "up": "ferryman_server.cli.up:up",
    "predict": "ferryman_server.cli.predict_cmd:predict",
    "generate": "ferryman_server.cli.generate_cmd:generate",
    "top": "ferryman_server.cli.top_cmd:top",
    "canary": "ferryman_server.cli.canary_cmd:canary",
    "bench": "ferryman_server.cli.bench_cmd:bench",
}
"""Each command, in help order, and where it is defined (``module:attribute``): a Typer app
is a group of commands, a function one command."""


def load_command(name: str, target: str) -> click.Command:
    """The click command ``name`` from its ``module:attribute``, imported now."""
    module, _, attribute = target.partition(":")
    found = getattr(importlib.import_module(module), attribute)
    if isinstance(found, typer.Typer):
        command: click.Command = typer.main.get_group(found)
    else:
        single = typer.Typer()
        single.command(name)(found)
        command = typer.main.get_command(single)
    command.name = name
    return command


class LazyCommands(TyperGroup):
    """``ferryman``'s commands, each imported when it is called (or listed by ``--help``):
    a service's process (``ferryman serve node``, started by ``up``) pays for its own
    imports only, not for every command's (0.5-0.9 CPU-s each on a start, measured)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            try:
                self.commands[cmd_name] = load_command(cmd_name, COMMANDS[cmd_name])
            except ModuleNotFoundError as exc:  # a command's imports are the platform's
                from ferryman_server.cli.__main__ import require_server

                require_server(exc)
                raise
        return self.commands.get(cmd_name)


app = typer.Typer(
    name="ferryman",
    help="Ferryman: a gRPC-native, multi-tenant inference platform.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    cls=LazyCommands,
)


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
