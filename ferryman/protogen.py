"""Generate the Python stubs in ``ferryman/v1`` from ``protos/ferryman/v1``.

The stubs are committed so that tenant apps can ``pip install ferryman`` without
grpcio-tools at run time; a test regenerates them into a temporary folder and fails
on any difference, so the committed stubs never drift from the protos.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from importlib import resources
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = REPO_ROOT / "protos"
STUB_DIR = REPO_ROOT / "ferryman" / "v1"
STUB_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


def _include_dirs() -> list[str]:
    """Proto include paths: our protos, protobuf's well-known types, google.rpc."""
    import google.rpc  # from googleapis-common-protos, a grpcio-status dependency

    well_known = resources.files("grpc_tools") / "_proto"
    googleapis = Path(next(iter(google.rpc.__path__))).parent.parent
    return [str(PROTO_ROOT), str(well_known), str(googleapis)]


def generate(out_dir: Path) -> list[Path]:
    """Compile every proto under protos/ferryman/v1 into ``out_dir``; return the files."""
    from grpc_tools import protoc

    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in (PROTO_ROOT / "ferryman/v1").glob("*.proto"))
    args = ["grpc_tools.protoc"]
    args += [f"-I{d}" for d in _include_dirs()]
    args += [f"--python_out={out_dir}", f"--pyi_out={out_dir}", f"--grpc_python_out={out_dir}"]
    args += protos
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed: {' '.join(args)}")
    return sorted((out_dir / "ferryman" / "v1").glob("*_pb2*"))


def stub_files(directory: Path) -> dict[str, str]:
    """Generated stub files in ``directory`` by name -> text."""
    return {p.name: p.read_text() for p in sorted(directory.iterdir()) if p.name.endswith(STUB_SUFFIXES)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if stubs are stale")
    opts = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        fresh = stub_files(Path(tmp) / "ferryman" / "v1")
        if opts.check:
            stale = sorted(set(fresh.items()) ^ set(stub_files(STUB_DIR).items()))
            if stale:
                names = sorted({name for name, _ in stale})
                print(f"stale stubs: {', '.join(names)}; run `make protos`", file=sys.stderr)
                return 1
            return 0
        for old in STUB_DIR.iterdir():
            if old.name.endswith(STUB_SUFFIXES):
                old.unlink()
        for name in fresh:
            shutil.copy(Path(tmp) / "ferryman" / "v1" / name, STUB_DIR / name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
