"""Generate the Python stubs in ``ferryman/v1`` and ``ferryman/oip/v2`` from ``protos/``.

The stubs are committed so that tenant apps can ``pip install ferryman`` without
grpcio-tools at run time; a test regenerates them into a temporary folder and fails
on any difference, so the committed stubs never drift from the protos. Only ``protos/``
and protobuf's well-known types are on the include path: the folder is complete on its
own (it ships the ``google/rpc`` protos it imports), as any other language needs it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = REPO_ROOT / "protos"
PACKAGES = ("ferryman/v1", "ferryman/oip/v2")
"""Proto folders under protos/ whose stubs live at the same path under the repo root."""
STUB_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")
GENERATOR_REQUIREMENTS = PROTO_ROOT / "generator-requirements.txt"
"""The one grpcio-tools that generates the stubs: the oldest whose runtime the SDK accepts.
Stubs refuse any protobuf or grpcio runtime older than their generator, so the floors the
SDK declares (sdk/pyproject.toml) are this generator's versions (a test holds them equal)."""
GENERATOR_ENV = "FERRYMAN_PROTOC_PYTHON"
DEFAULT_GENERATOR = REPO_ROOT / ".venv" / "protoc" / "bin" / "python"
"""The interpreter with the pinned grpcio-tools: ``make protos`` installs it there; the
``FERRYMAN_PROTOC_PYTHON`` environment variable names another."""


def generator() -> Path:
    """The interpreter that runs the pinned grpcio-tools (GENERATOR_REQUIREMENTS)."""
    python = Path(os.environ.get(GENERATOR_ENV) or DEFAULT_GENERATOR)
    if not python.exists():
        raise SystemExit(
            f"no stub generator at {python}: `make protos` installs the pinned grpcio-tools "
            f"({GENERATOR_REQUIREMENTS.name}) into .venv/protoc, or set {GENERATOR_ENV}"
        )
    return python


def generate(out_dir: Path) -> None:
    """Compile every proto of PACKAGES into ``out_dir`` (under the same relative paths),
    with only our protos and protobuf's well-known types on the include path (grpc_tools'
    entry point adds the latter)."""
    protos = sorted(
        str(p.relative_to(PROTO_ROOT)) for package in PACKAGES for p in (PROTO_ROOT / package).glob("*.proto")
    )
    args = [str(generator()), "-m", "grpc_tools.protoc", f"-I{PROTO_ROOT}"]
    args += [f"--python_out={out_dir}", f"--pyi_out={out_dir}", f"--grpc_python_out={out_dir}"]
    args += protos
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"protoc failed: {' '.join(args)}\n{done.stderr}")


def stub_files(directory: Path) -> dict[str, str]:
    """Generated stub files under ``directory`` (in PACKAGES) by relative path -> text."""
    return {
        f"{package}/{p.name}": p.read_text()
        for package in PACKAGES
        if (directory / package).is_dir()
        for p in sorted((directory / package).iterdir())
        if p.name.endswith(STUB_SUFFIXES)
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if stubs are stale")
    opts = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        fresh = stub_files(Path(tmp))
        if opts.check:
            stale = sorted(set(fresh.items()) ^ set(stub_files(REPO_ROOT).items()))
            if stale:
                names = sorted({name for name, _ in stale})
                print(f"stale stubs: {', '.join(names)}; run `make protos`", file=sys.stderr)
                return 1
            return 0
        for old in stub_files(REPO_ROOT):
            (REPO_ROOT / old).unlink()
        for name in fresh:
            target = REPO_ROOT / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(Path(tmp) / name, target)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
