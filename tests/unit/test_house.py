"""House rules that keep each room's insides as clear as its doors, checked over the source:
who may change a replica's slot counters, what the generation engine may import, and that
nothing changes the interpreter's path at run time."""

from __future__ import annotations

import ast
import re
import subprocess

from layers import REPO, imported_names

REPLICA_COUNTERS = {"inflight", "outstanding_rows", "generations", "tenant_slots"}


def assigned_attributes(tree: ast.AST) -> set[tuple[str, int]]:
    """(attribute, line) for every ``x.attr = / += ...`` and ``x.attr[k] = ...``."""
    found: set[tuple[str, int]] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt):
            continue
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        for target in targets:
            while isinstance(target, ast.Subscript):
                target = target.value
            if isinstance(target, ast.Attribute):
                found.add((target.attr, node.lineno))
    return found


def test_only_a_replica_changes_its_slot_counters() -> None:
    """Replicas own their slots (``claim``/``release``, ``begin``/``end_generation``): the
    dispatcher and the generation relay call them, never count for them."""
    wrong = []
    for path in sorted((REPO / "batcher").rglob("*.py")):
        tree = ast.parse(path.read_text())
        replica = next(
            (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "Replica"), None
        )
        own = set() if replica is None else {line for _, line in assigned_attributes(replica)}
        wrong += [
            f"{path.relative_to(REPO)}:{line} {attr}"
            for attr, line in assigned_attributes(tree)
            if attr in REPLICA_COUNTERS and line not in own
        ]
    assert wrong == []


def test_the_generation_engine_imports_nothing_of_the_node() -> None:
    """``gpu_node/generation/`` is the engine alone (scheduler, sampler, model, grammar): the
    node's runtime, metrics and demo models import it, not the other way round."""
    inside = "ferryman_server.gpu_node.generation"
    found = [
        f"{path.relative_to(REPO)}: {name}"
        for path in sorted((REPO / "gpu_node" / "generation").rglob("*.py"))
        for name in imported_names(path)
        if name.startswith("ferryman_server.gpu_node") and not name.startswith(inside)
    ]
    assert found == []


def test_nothing_changes_the_interpreters_path_at_run_time() -> None:
    listed = subprocess.run(
        ["git", "grep", "-nE", r"sys\.path\.(insert|append)|PYTHONPATH", "--", "*.py"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.splitlines()
    outside = [line for line in listed if not re.match(r"(tests|bench)/", line)]
    assert outside == []


def test_the_router_core_knows_no_door() -> None:
    """The router's core (gateway, pipeline, routing, spans) imports none of its doors (gRPC
    decoding, HTTP statuses): a door converts and hands the core what it needs. Only the
    router's wiring (``server.py``) puts the doors on their ports."""
    doors = "ferryman_server.router.doors"
    found = [
        f"{path.relative_to(REPO)}: {name}"
        for path in sorted((REPO / "router").glob("*.py"))
        if path.name != "server.py"
        for name in imported_names(path)
        if name.startswith(doors)
    ]
    assert found == []
