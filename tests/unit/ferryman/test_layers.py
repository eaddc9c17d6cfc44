"""The layers hold: the SDK imports only the wire contract (what `pip install ferryman`
ships deps for), the kernel imports no service, services never import each other (they
talk through the protos), and only the CLI composes them."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SDK_ALLOWED = (
    "ferryman.sdk",
    "ferryman.errors",
    "ferryman.tensors",
    "ferryman.v1",
    "grpc",
    "grpc_status",
    "google",
    "numpy",
)
SERVICES = ("router", "batcher", "gpu_node", "admin_ui")
STDLIB = frozenset(sys.stdlib_module_names) | {"__future__"}
PLATFORM = (*SERVICES, "registry", "ferryman_cli", "ferryman_cli.bench")


def imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def within(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(f"{p}.") for p in packages)


def modules(folder: str) -> list[Path]:
    return sorted((REPO / folder).rglob("*.py"))


@pytest.mark.parametrize(
    "path", [*modules("ferryman/sdk"), REPO / "ferryman/errors.py", REPO / "ferryman/tensors.py"], ids=str
)
def test_the_sdk_imports_only_the_contract_and_its_dependencies(path: Path) -> None:
    third_party = {n for n in imports(path) if n.split(".")[0] not in STDLIB}
    assert all(within(n, SDK_ALLOWED) for n in third_party), sorted(third_party)


@pytest.mark.parametrize("path", modules("ferryman_kernel"), ids=str)
def test_the_kernel_imports_no_service(path: Path) -> None:
    assert not [n for n in imports(path) if within(n, PLATFORM)]


@pytest.mark.parametrize("service", SERVICES)
def test_services_never_import_each_other(service: str) -> None:
    others = tuple(s for s in SERVICES if s != service)
    for path in modules(service):
        assert not [n for n in imports(path) if within(n, (*others, "ferryman_cli"))], path


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
