"""``ferryman admin``: run the Streamlit console; ``ferryman admin set-password``."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from ferryman_server.cli.context import migrated_engine
from ferryman_server.cli.output import console, fail, refusals

admin_app = typer.Typer(help="The admin console.", invoke_without_command=True)
MIN_PASSWORD_LENGTH = 8


def console_command(port: int, address: str) -> list[str]:
    """The streamlit command line that serves the console."""
    from ferryman_server import admin_ui

    app = Path(admin_ui.__file__).resolve().parent / "app.py"
    return [
        sys.executable,
        "-m",
        "ferryman_server.admin_ui.serve",  # Streamlit's command line, its server under a connection guard
        "run",
        str(app),
        "--server.port",
        str(port),
        "--server.address",
        address,
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        "--client.toolbarMode",
        "viewer",
        # TLS as every other listener has it (FERRYMAN_TLS_CERT/KEY): logins carry passwords.
        *tls_args(),
    ]


def tls_args() -> list[str]:
    """Streamlit's TLS options for this process's certificate, none without one."""
    from ferryman_server.kernel.config import CommonSettings

    common = CommonSettings()
    if not common.tls_cert:
        return []
    return ["--server.sslCertFile", common.tls_cert, "--server.sslKeyFile", common.tls_key]


@admin_app.callback()
def admin(
    ctx: typer.Context,
    port: Annotated[int, typer.Option(help="HTTP port of the console.")] = 8501,
    address: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
) -> None:
    """Run the admin console (log in with the admin password)."""
    if ctx.invoked_subcommand is not None:
        return
    migrated_engine()  # refuse early on an unmigrated registry
    command = console_command(port, address)
    # Streamlit takes this process's place: a signal to its PID (a supervisor's, a test's)
    # reaches the console itself, and no orphan is left serving.
    os.execv(command[0], command)


PasswordStdin = Annotated[bool, typer.Option("--password-stdin", help="Read it from stdin.")]


def _new_password(from_stdin: bool, prompt: str) -> str:
    if from_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = typer.prompt(prompt, hide_input=True, confirmation_prompt=True)
    if len(password) < MIN_PASSWORD_LENGTH:
        fail(f"the password needs at least {MIN_PASSWORD_LENGTH} characters")
    return password


@admin_app.command("set-password")
def set_password(password_stdin: PasswordStdin = False) -> None:
    """Set the platform's admin password (the console's bootstrap ``admin``; an scrypt hash)."""
    from ferryman_server.admin_ui.auth import hash_password
    from ferryman_server.registry.writer import RegistryWriter

    password = _new_password(password_stdin, "Admin password")
    with refusals():
        RegistryWriter(migrated_engine(), actor="cli").set_admin_password_hash(hash_password(password))
    console.print("admin password set")


@admin_app.command("add-person")
def add_person(
    name: str,
    role: Annotated[str, typer.Option(help="viewer, operator or admin.")] = "viewer",
    password_stdin: PasswordStdin = False,
) -> None:
    """Add a console account (or give it a new role and password)."""
    from ferryman_server.admin_ui.auth import hash_password
    from ferryman_server.registry.writer import RegistryWriter

    password = _new_password(password_stdin, f"Password of {name}")
    with refusals():
        RegistryWriter(migrated_engine(), actor="cli").save_account(name, role, hash_password(password))
    console.print(f"{name} can log in as {role}")
