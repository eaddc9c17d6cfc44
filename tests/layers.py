"""The house's rooms by altitude and the package-level import arrows between them.

``python tests/layers.py`` prints every arrow (importer -> imported, with how many modules
import it) and exits non-zero if one runs back up or across between services.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ALTITUDES: tuple[tuple[str, ...], ...] = (
    ("ferryman",),
    ("kernel",),
    ("registry",),
    ("jobs",),
    ("router", "batcher", "gpu_node", "quota", "rollouts", "admin_ui"),
    ("cli",),
)
"""Bottom first: the SDK and wire contract, the service kernel, the registry, the job stores,
the services (which talk to each other only through the protos), the CLI (the one
composition root). Every room but the SDK is imported as ``ferryman_server.<room>``."""
PLATFORM = "ferryman_server"
ROOMS = {room: level for level, rooms in enumerate(ALTITUDES) for room in rooms}


def imported_names(path: Path) -> set[str]:
    """Absolute module names one file imports, wherever in the file (lazy imports too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def room_of(name: str) -> str | None:
    """The room an absolute module name lies in (``ferryman_server.router.x`` -> router),
    None for anything else."""
    parts = name.split(".")
    if parts[0] == PLATFORM:
        return parts[1] if len(parts) > 1 and parts[1] in ROOMS else None
    return parts[0] if parts[0] == "ferryman" else None


def modules(room: str) -> list[Path]:
    return sorted(p for p in (REPO / room).rglob("*.py") if "_pb2" not in p.name)


def arrows() -> dict[tuple[str, str], list[Path]]:
    """(importing room, imported room) -> the importing room's modules that make the arrow."""
    found: dict[tuple[str, str], list[Path]] = defaultdict(list)
    for room in ROOMS:
        for path in modules(room):
            targets = {target for n in imported_names(path) if (target := room_of(n))}
            for target in targets & ROOMS.keys() - {room}:
                found[(room, target)].append(path.relative_to(REPO))
    return dict(found)


def wrong(source: str, target: str) -> bool:
    """An arrow that runs up, or across between two services."""
    return ROOMS[target] >= ROOMS[source]


def main() -> int:
    bad = 0
    for (source, target), paths in sorted(arrows().items(), key=lambda a: (ROOMS[a[0][0]], a[0])):
        mark = "  WRONG" if wrong(source, target) else ""
        bad += bool(mark)
        print(f"{source:<18} -> {target:<18} {len(paths):>3} modules{mark}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
