"""The layers hold: every package-level import arrow runs down the altitudes of
``tests/layers.py`` (SDK, kernel, registry, job stores, services, CLI), services never import
each other (they talk through the protos), and the SDK imports only the wire contract and
what ``pip install ferryman`` ships dependencies for."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from layers import REPO, ROOMS, arrows, imported_names, main, modules, wrong

SDK_ALLOWED = ("ferryman", "grpc", "grpc_status", "google", "numpy")
STDLIB = frozenset(sys.stdlib_module_names) | {"__future__"}
NOT_ROOMS = {"tests", "bench", "build", "ferryman_server"}
"""Top-level folders with Python in them that are no room of the platform: tests and
benchmarks may import any room (they drive the platform from outside); ferryman_server is the
rooms' one import name (a link to each)."""


def within(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(f"{p}.") for p in packages)


@pytest.mark.parametrize("path", modules("ferryman"), ids=str)
def test_the_sdk_imports_only_the_contract_and_its_dependencies(path: Path) -> None:
    third_party = {n for n in imported_names(path) if n.split(".")[0] not in STDLIB}
    assert all(within(n, SDK_ALLOWED) for n in third_party), sorted(third_party)


def test_every_arrow_runs_down() -> None:
    found = arrows()
    assert found, "no arrows found: the rooms moved?"
    assert [(s, t, [str(p) for p in paths]) for (s, t), paths in found.items() if wrong(s, t)] == []


def test_an_arrow_up_or_across_is_caught() -> None:
    assert wrong("registry", "router")
    assert wrong("ferryman", "kernel")
    assert wrong("router", "quota")
    assert wrong("router", "batcher")
    assert not wrong("router", "registry")
    assert not wrong("cli", "router")


def test_the_arrow_listing_exits_clean(capsys: pytest.CaptureFixture[str]) -> None:
    assert main() == 0
    assert "router             -> registry" in capsys.readouterr().out


def test_every_top_level_package_is_a_room() -> None:
    packages = {p.parent.name for p in REPO.glob("*/__init__.py")}
    assert packages - NOT_ROOMS == set(ROOMS)


def test_the_sdk_never_loads_the_oip_protos() -> None:
    """tritonclient registers protobuf package `inference` too; an app that imports both it
    and the SDK must not get a duplicate-symbol error, so the SDK never loads ferryman.oip."""
    probe = (
        "import ferryman, ferryman.sdk.client\n"
        "from google.protobuf import descriptor_pool\n"
        "try:\n"
        "    descriptor_pool.Default().FindFileByName('ferryman/oip/v2/grpc_predict_v2.proto')\n"
        "except KeyError:\n"
        "    print('absent')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "absent"


def test_no_file_imports_a_room_by_a_bare_name() -> None:
    """One import name per file: a room is ``ferryman_server.<room>`` everywhere, never
    ``router`` or ``registry`` (which would load a second copy, or an app's own module)."""
    bare = set(ROOMS) - {"ferryman"}
    found = [
        f"{path.relative_to(REPO)}: {name}"
        for folder in [*ROOMS, "tests", "bench"]
        for path in sorted((REPO / folder).rglob("*.py"))
        if "_pb2" not in path.name
        for name in imported_names(path)
        if name.split(".")[0] in bare
    ]
    assert found == []
