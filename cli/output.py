"""How CLI commands print: rich tables for people, one JSON document with ``--json``."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table

from ferryman_server.registry.validation import RegistryError

JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON document for scripts.")]

console = Console()
err_console = Console(stderr=True)


def say_error(reason: str) -> None:
    """A one-line reason on stderr."""
    err_console.print(f"[red]error:[/red] {reason}", highlight=False, soft_wrap=True)


def fail(reason: str) -> NoReturn:
    """Exit non-zero with a one-line reason on stderr (inside a command)."""
    say_error(reason)
    raise typer.Exit(code=1)


@contextmanager
def refusals() -> Iterator[None]:
    """Turn a refused registry write into a one-line error and a non-zero exit."""
    try:
        yield
    except RegistryError as exc:
        fail(str(exc))


def emit(data: Any, as_json: bool, human: Callable[[], None]) -> None:
    """Print ``data`` as JSON, or call ``human`` to print it for people."""
    if as_json:
        typer.echo(json.dumps(data, default=str, sort_keys=True))
    else:
        human()


def table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A rich table of rows."""
    out = Table(title=title)
    for column in columns:
        out.add_column(column)
    for row in rows:
        out.add_row(*(str(cell) for cell in row))
    console.print(out)


USD_PLACES = 10
"""Decimal places of a printed cost: a thousandth of a cent per million items still shows."""


def usd(value: float) -> str:
    """A cost in dollars as a plain decimal (``0.0000006``, not ``6.000000000000001e-07``)."""
    return f"{value:.{USD_PLACES}f}".rstrip("0").rstrip(".") or "0"
