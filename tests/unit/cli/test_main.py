"""The ``ferryman`` command group: commands load when called, and all of them are there."""

from __future__ import annotations

import subprocess
import sys

import pytest
import typer
from typer import _click as click
from typer.testing import CliRunner

from ferryman_server.cli.main import COMMANDS, LazyCommands, app, load_command


def test_every_command_loads_under_its_own_name() -> None:
    for name, target in COMMANDS.items():
        command = load_command(name, target)
        assert command.name == name
        assert isinstance(command, click.Command)
        assert command.help or command.short_help, f"{name} has no help"


def test_help_lists_every_command_in_order() -> None:
    result = CliRunner().invoke(app, ["--help"], terminal_width=200)
    assert result.exit_code == 0
    listed = [
        line.split()[1] for line in result.output.splitlines() if line.startswith("│ ") and "  " in line
    ]
    commands = [name for name in listed if name in COMMANDS]
    assert commands == list(COMMANDS)


def test_a_group_stays_a_group_and_an_unknown_command_is_refused() -> None:
    runner = CliRunner()
    # db has one command: it must stay `ferryman db upgrade`, not become `ferryman db`.
    assert runner.invoke(app, ["db", "--help"]).exit_code == 0
    assert "upgrade" in runner.invoke(app, ["db", "--help"], terminal_width=200).output
    unknown = runner.invoke(app, ["no-such-command"])
    assert unknown.exit_code == 2
    assert isinstance(typer.main.get_command(app), LazyCommands)


def test_starting_a_service_does_not_import_every_command() -> None:
    """What ``ferryman serve ...`` imports before its service: not up, the console's auth,
    or alembic (what `up` starts pays each of these once per process otherwise)."""
    heavy = (
        "ferryman_server.cli.up",
        "ferryman_server.admin_ui.auth",
        "alembic",
        "ferryman_server.cli.registry_cmds",
    )
    probe = (
        "import sys, ferryman_server.cli.main as m; m.load_command('serve', m.COMMANDS['serve']); "
        f"print(sorted(n for n in {heavy!r} if n in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "[]"


def test_a_command_whose_platform_dependency_is_missing_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An SDK-only install lacks the platform's libraries: the command that needs one says
    which extra to install (it is imported only when called, so this is where it shows)."""
    monkeypatch.setitem(COMMANDS, "needs-absent", "no_such_platform_dependency:app")
    result = CliRunner().invoke(app, ["needs-absent"])
    assert result.exit_code != 0
    assert isinstance(result.exception, SystemExit)
    assert "pip install 'ferryman[server]'" in str(result.exception.code)
    assert "no_such_platform_dependency" in str(result.exception.code)
