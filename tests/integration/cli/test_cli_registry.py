"""The registry commands of the ``ferryman`` CLI against a real SQLite registry."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from ferryman_server.cli import context
from ferryman_server.cli.main import app
from ferryman_server.kernel.net import free_port

# Left out of make test-fast: one ferryman process per command.
pytestmark = pytest.mark.slow

SCHEMA = json.dumps(
    {
        "inputs": [{"name": "input", "dtype": "FP32", "shape": [4]}],
        "outputs": [{"name": "output", "dtype": "FP32", "shape": [2]}],
    }
)


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[CliRunner]:
    monkeypatch.setenv("FERRYMAN_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("FERRYMAN_DATABASE_URL", raising=False)
    context.settings.cache_clear()
    context.engine.cache_clear()
    yield CliRunner()
    context.engine().dispose()
    context.settings.cache_clear()
    context.engine.cache_clear()


def run(cli: CliRunner, *args: str, ok: bool = True) -> Any:
    result = cli.invoke(app, list(args))
    if ok:
        assert result.exit_code == 0, result.output
    else:
        assert result.exit_code != 0, result.output
    return result


def run_json(cli: CliRunner, *args: str) -> Any:
    return json.loads(run(cli, *args, "--json").stdout)


def test_version(cli: CliRunner) -> None:
    assert run(cli, "--version").stdout.strip() == "ferryman 0.1.0"


def test_commands_refuse_unmigrated_registry(cli: CliRunner) -> None:
    result = run(cli, "tenant", "list", ok=False)
    assert "ferryman db upgrade" in result.output


def test_tenant_key_quota_flow(cli: CliRunner) -> None:
    assert run_json(cli, "db", "upgrade")["revision"] == "0012"
    created = run_json(cli, "tenant", "create", "acme", "--priority", "3", "--weight", "2")
    assert created["key"].startswith(f"fm_{created['prefix']}_")
    listed = run_json(cli, "tenant", "list")
    assert listed[0]["name"] == "acme" and listed[0]["key_prefixes"] == [created["prefix"]]
    assert listed[0]["weight"] == 2.0
    assert run_json(cli, "tenant", "weight", "acme", "0.5") == {"tenant": "acme", "weight": 0.5}
    assert run_json(cli, "tenant", "list")[0]["weight"] == 0.5
    assert run_json(cli, "tenant", "spill", "acme", "--on") == {"tenant": "acme", "spill_to_job": True}
    assert run_json(cli, "tenant", "list")[0]["spill_to_job"] is True
    assert created["key"] not in json.dumps(listed)
    second = run_json(cli, "key", "issue", "acme")
    run(cli, "key", "revoke", created["prefix"])
    assert run_json(cli, "tenant", "list")[0]["key_prefixes"] == [second["prefix"]]
    run(
        cli,
        "quota",
        "set",
        "acme",
        "--rpm",
        "100",
        "--burst",
        "10",
        "--cost-per-day",
        "2.5",
        "--mode",
        "soft",
    )
    quota = run_json(cli, "quota", "show", "acme")
    assert quota == [
        {
            "model": "",
            "rpm": 100,
            "tpm": None,
            "cost_per_day_usd": 2.5,
            "burst": 10,
            "max_concurrency": None,
            "mode": "soft",
            "jobs_in_flight": None,
            "job_items_per_day": None,
        }
    ]


def test_model_and_route_flow(cli: CliRunner, tmp_path: Path) -> None:
    run(cli, "db", "upgrade")
    artifact = tmp_path / "m.pt2"
    artifact.write_bytes(b"weights")
    for version in ("1", "2"):
        registered = run_json(
            cli,
            "model",
            "register",
            "mlp",
            "--version",
            version,
            "--artifact",
            str(artifact),
            "--format",
            "torch_export",
            "--schema",
            SCHEMA,
            "--no-check",  # a stand-in artifact: nothing to load
        )
        assert registered["status"] == "REGISTERED" and len(registered["sha256"]) == 64
    route = run_json(cli, "route", "set", "mlp", "1=90", "2=10", "--sticky", "user")
    assert route["targets"] == {"1": 90, "2": 10} and route["sticky"] == "user"
    assert run_json(cli, "route", "show", "mlp") == route
    run(cli, "route", "set", "mlp", "2=100")
    assert run_json(cli, "route", "rollback", "mlp")["targets"] == {"1": 90, "2": 10}
    statuses = {v["version"]: v["status"] for v in run_json(cli, "model", "list")[0]["versions"]}
    assert statuses == {"1": "ACTIVE", "2": "ACTIVE"}
    assert run_json(cli, "model", "place", "mlp", "--version", "2", "--node", "gpu")["new"] is True
    assert run_json(cli, "model", "place", "mlp", "--version", "2", "--node", "gpu")["new"] is False
    run(cli, "model", "place", "mlp", "--version", "9", "--node", "gpu", ok=False)
    from ferryman_server.registry.reader import RegistryReader

    placed = RegistryReader(context.engine()).placements_for("gpu-node-7", pool="gpu")
    assert [(m, v.version) for m, v in placed] == [("mlp", "2")]
    assert run_json(cli, "model", "unplace", "mlp", "--version", "2", "--node", "gpu")["removed"] is True
    assert run_json(cli, "model", "unplace", "mlp", "--version", "2", "--node", "gpu")["removed"] is False
    assert RegistryReader(context.engine()).placements_for("gpu-node-7", pool="gpu") == []


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["route", "set", "mlp", "1=90", "2=20"], "route weights must sum to 100, got 110"),
        (["route", "set", "mlp", "1=50", "7=50"], "no version mlp:7"),
        (["route", "set", "nope", "1=100"], "no model 'nope'"),
        (["quota", "set", "ghost", "--rpm", "5"], "no tenant 'ghost'"),
        (["key", "issue", "ghost"], "no tenant 'ghost'"),
        (["tenant", "create", "acme"], "tenant 'acme' already exists"),
        (
            [
                "model",
                "register",
                "mlp",
                "--version",
                "9",
                "--artifact",
                "/nonexistent/x.pt2",
                "--format",
                "torch_export",
                "--schema",
                SCHEMA,
                "--no-check",  # a stand-in artifact: nothing to load
            ],
            "not found",
        ),
        (
            [
                "model",
                "register",
                "mlp",
                "--version",
                "9",
                "--artifact",
                "/nonexistent/x.pt2",
                "--format",
                "onnx",
                "--schema",
                SCHEMA,
            ],
            "format must be one of",
        ),
    ],
)
def test_bad_input_exits_nonzero_with_one_line_and_changes_nothing(
    cli: CliRunner, tmp_path: Path, args: list[str], reason: str
) -> None:
    run(cli, "db", "upgrade")
    artifact = tmp_path / "m.pt2"
    artifact.write_bytes(b"weights")
    run(cli, "tenant", "create", "acme")
    run(
        cli,
        "model",
        "register",
        "mlp",
        "--version",
        "1",
        "--artifact",
        str(artifact),
        "--format",
        "torch_export",
        "--schema",
        SCHEMA,
        "--no-check",  # a stand-in artifact: nothing to load
    )
    run(cli, "route", "set", "mlp", "1=100")
    from ferryman_server.registry.reader import RegistryReader

    revision = RegistryReader(context.engine()).revision()
    result = run(cli, *args, ok=False)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and reason in lines[0], result.stderr
    assert RegistryReader(context.engine()).revision() == revision


def test_admin_set_password_stores_only_a_hash(cli: CliRunner) -> None:
    run(cli, "db", "upgrade")
    short = cli.invoke(app, ["admin", "set-password", "--password-stdin"], input="short\n")
    assert short.exit_code != 0 and "at least 8" in short.stderr
    result = cli.invoke(app, ["admin", "set-password", "--password-stdin"], input="a long password\n")
    assert result.exit_code == 0, result.output
    from ferryman_server.admin_ui.auth import verify_password
    from ferryman_server.registry.reader import RegistryReader

    reader = RegistryReader(context.engine())
    stored = reader.admin_password_hash()
    assert stored is not None and "a long password" not in stored
    assert verify_password("a long password", stored)
    assert reader.audit_events(limit=1)[0].action == "admin.password"


def test_admin_add_person_with_a_role(cli: CliRunner) -> None:
    run(cli, "db", "upgrade")
    bad = cli.invoke(
        app, ["admin", "add-person", "vera", "--role", "root", "--password-stdin"], input="a long one\n"
    )
    assert bad.exit_code != 0 and "invalid role" in bad.stderr
    result = cli.invoke(
        app, ["admin", "add-person", "vera", "--role", "operator", "--password-stdin"], input="a long one\n"
    )
    assert result.exit_code == 0, result.output
    from ferryman_server.admin_ui.auth import verify_password
    from ferryman_server.registry.reader import RegistryReader

    account = RegistryReader(context.engine()).account("vera")
    assert account is not None and account.role == "operator"
    assert verify_password("a long one", account.password_hash)


def test_an_unreachable_registry_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "FERRYMAN_DATA_DIR": str(tmp_path),
        # Nothing listens there: the database is down.
        "FERRYMAN_DATABASE_URL": f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/ferryman",
    }
    done = subprocess.run(
        [sys.executable, "-m", "ferryman_server.cli", "tenant", "create", "acme"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: the registry database cannot be reached"), lines


def test_a_batcher_address_without_a_port_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    env = {**os.environ, "FERRYMAN_DATA_DIR": str(tmp_path)}
    env.pop("FERRYMAN_DATABASE_URL", None)

    def ferryman(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "ferryman_server.cli", *args]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)

    assert ferryman("db", "upgrade").returncode == 0
    done = ferryman("serve", "router", "--listen", f"127.0.0.1:{free_port()}", "--batchers", "nohost")
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert lines == ["error: batcher address 'nohost' is not host:port"], lines


class Tiny(torch.nn.Module):
    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return input[:, :2] * 2


def test_a_program_exported_with_a_static_batch_is_refused_with_its_reason(
    cli: CliRunner, tmp_path: Path
) -> None:
    """torch.export's default fixes the batch at 1: the program would load, then fail every
    batch of two on the node. It is refused at registration, saying why and how to fix it;
    exported with a dynamic batch it is registered, checked."""
    run(cli, "db", "upgrade")
    static, dynamic = tmp_path / "static.pt2", tmp_path / "dynamic.pt2"
    torch.export.save(torch.export.export(Tiny(), (torch.randn(1, 4),)), static)
    # An example of one row would pin the batch at 1 even marked dynamic: export with two. As
    # the README says it, a tuple that follows the positional inputs (forward names its own
    # argument ``input``, not ``x``).
    batch = ({0: torch.export.Dim("batch")},)
    torch.export.save(torch.export.export(Tiny(), (torch.randn(2, 4),), dynamic_shapes=batch), dynamic)
    args = ["model", "register", "tiny", "--format", "torch_export", "--schema", SCHEMA]
    args += ["--max-batch-size", "8"]
    refused = run(cli, *args, "--version", "1", "--artifact", str(static), ok=False)
    message = " ".join(refused.output.split())
    assert "tiny:1 would not serve" in message and "batch 2" in message and "dynamic_shapes" in message
    assert "Traceback" not in refused.output
    assert run_json(cli, "model", "list") == []  # nothing registered
    registered = run_json(cli, *args, "--version", "2", "--artifact", str(dynamic))
    assert registered["status"] == "REGISTERED"
    assert registered["checked"] == "loaded and called at batch 1 and 2"


def test_an_empty_artifact_is_refused_before_anything_loads(cli: CliRunner) -> None:
    """``--artifact ""`` would be read as the current directory: refused at once, saying
    what to give, with no load attempted (no torch warnings, no traceback)."""
    run(cli, "db", "upgrade")
    args = ["model", "register", "tiny", "--format", "torch_export", "--schema", SCHEMA]
    refused = run(cli, *args, "--version", "1", "--artifact", "", ok=False)
    message = " ".join(refused.output.split())
    assert "--artifact is empty" in message and "ferryman model push" in message
    assert "Traceback" not in refused.output and "Warning" not in refused.output
    assert run_json(cli, "model", "list") == []


def test_an_artifact_pushed_to_the_registry_is_registered_by_its_uri(cli: CliRunner, tmp_path: Path) -> None:
    """No object store: the registry keeps the artifact, and versions name it by its URI."""
    run(cli, "db", "upgrade")
    artifact = tmp_path / "tiny.pt2"
    batch = {"input": {0: torch.export.Dim("batch")}}
    torch.export.save(torch.export.export(Tiny(), (torch.randn(2, 4),), dynamic_shapes=batch), artifact)
    pushed = run_json(cli, "model", "push", str(artifact))
    assert pushed["uri"] == f"ferryman://artifacts/{pushed['sha256']}" and pushed["kind"] == "file"
    assert run_json(cli, "model", "push", str(artifact)) == pushed, "pushing again changes nothing"
    args = ["model", "register", "tiny", "--format", "torch_export", "--schema", SCHEMA]
    registered = run_json(cli, *args, "--version", "1", "--artifact", pushed["uri"])
    assert registered["sha256"] == pushed["sha256"]
    assert registered["checked"] == "loaded and called at batch 1 and 2", (
        "fetched and checked as a node would"
    )
    bad = run(cli, *args, "--version", "2", "--artifact", "ferryman://artifacts/" + "0" * 64, ok=False)
    assert "was pushed" in bad.output
    # Over http(s), too: fetched, its digest checked, loaded and called before it is registered.
    served = tmp_path / "served"
    served.mkdir()
    (served / "tiny.pt2").write_bytes(artifact.read_bytes())
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(served))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/tiny.pt2"
        good = run_json(cli, *args, "--version", "3", "--artifact", url, "--sha256", pushed["sha256"])
        assert good["checked"] == "loaded and called at batch 1 and 2"
        wrong = run(cli, *args, "--version", "4", "--artifact", url, "--sha256", "1" * 64, ok=False)
        assert "would not serve" in wrong.output and "sha256" in wrong.output
        assert [v["version"] for v in run_json(cli, "model", "list")[0]["versions"]] == ["1", "3"]
    finally:
        httpd.shutdown()
        httpd.server_close()
