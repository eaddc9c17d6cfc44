"""Generate ``docs/configuration.md`` from the settings models: every ``FERRYMAN_*``
variable with its type, bounds, default and the field's own docstring.

The reference is committed; a test regenerates it and fails on any difference, so the docs
never drift from the models (``python -m ferryman_server.cli.configuration`` rewrites it,
``--check`` only compares).
"""

from __future__ import annotations

import argparse
import sys
import types
from collections.abc import Iterator
from enum import Enum
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from pydantic_settings import BaseSettings

from ferryman_server.admin_ui.context import ConsoleSettings
from ferryman_server.batcher.settings import BatcherSettings
from ferryman_server.gpu_node.settings import NodeSettings
from ferryman_server.kernel.config import CommonSettings
from ferryman_server.kernel.telemetry import TraceSettings
from ferryman_server.quota.settings import QuotaSettings
from ferryman_server.rollouts.settings import RolloutSettings
from ferryman_server.router.settings import RouterSettings

REFERENCE = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"
MODELS: tuple[tuple[str, type[BaseSettings]], ...] = (
    ("Every process", CommonSettings),
    ("Traces (every process)", TraceSettings),
    ("Router (`ferryman serve router`)", RouterSettings),
    ("Quota service (`ferryman serve quota`, or co-hosted in the router)", QuotaSettings),
    ("Batcher (`ferryman serve batcher`, or in the router's process)", BatcherSettings),
    ("Node (`ferryman serve node`)", NodeSettings),
    ("Rollout controller (`ferryman serve rollouts`)", RolloutSettings),
    ("Console (`ferryman admin`)", ConsoleSettings),
)
"""Every settings model of the platform, in the order the reference lists them."""
BOUNDS = (
    (annotated_types.Gt, "gt", ">"),
    (annotated_types.Ge, "ge", "≥"),
    (annotated_types.Lt, "lt", "<"),
    (annotated_types.Le, "le", "≤"),
)
HEADER = """# Configuration reference

Generated from the settings models by `python -m ferryman_server.cli.configuration`; do not edit
(a test fails when it is stale). Every setting is an environment variable; the `ferryman`
command's flags, where a command has one, override it. Durations are seconds (names end in
`_s`), sizes are bytes, and a list is JSON (`'["a", "b"]'`). Settings that must agree are
checked together when a process starts: it refuses to start and names both.
"""


def type_name(annotation: Any) -> str:
    """How a field's type reads in the reference."""
    origin = get_origin(annotation)
    if origin is Literal:
        return " \\| ".join(f"`{a}`" for a in get_args(annotation))
    if origin in (Union, types.UnionType):
        return " \\| ".join(type_name(a) for a in get_args(annotation))
    if origin is list:
        return f"list of {type_name(get_args(annotation)[0])}"
    if annotation is type(None):
        return "unset"
    if annotation is SecretStr:
        return "secret"
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return " \\| ".join(f"`{m.value}`" for m in annotation)
    if isinstance(annotation, type) and issubclass(annotation, Path):
        return "path"
    return getattr(annotation, "__name__", str(annotation))


def bounds(info: FieldInfo) -> str:
    marks = []
    for meta in info.metadata:
        for kind, attribute, sign in BOUNDS:
            if isinstance(meta, kind):
                marks.append(f"{sign} {getattr(meta, attribute):g}")
    return ", ".join(marks)


def default(info: FieldInfo) -> str:
    if info.default_factory is not None:
        made = info.default_factory()  # type: ignore[call-arg]
        # A computed default (a home folder, a host name) would write this machine into the docs.
        return f"`{made!r}`" if made in ([], {}) else "computed: see its description"
    if info.default is PydanticUndefined:
        return "required"
    value = info.default
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    if isinstance(value, Enum):
        value = value.value
    if value is None:
        return "unset"
    if isinstance(value, float):
        return f"`{value:g}`"
    return f"`{value!r}`" if isinstance(value, str) else f"`{value}`"


def one_line(text: str | None) -> str:
    return " ".join((text or "").split()).replace("|", "\\|")


def rows(model: type[BaseSettings]) -> Iterator[str]:
    prefix = str(model.model_config.get("env_prefix", ""))
    for name, info in model.model_fields.items():
        kind = type_name(info.annotation)
        if limits := bounds(info):
            kind = f"{kind} ({limits})"
        yield f"| `{prefix}{name.upper()}` | {kind} | {default(info)} | {one_line(info.description)} |"


def render() -> str:
    parts = [HEADER]
    for title, model in MODELS:
        where = f"{model.__module__}.{model.__qualname__}"
        prefix = model.model_config.get("env_prefix", "")
        parts.append(f"\n## {title}\n\n`{where}`, prefix `{prefix}`.\n")
        parts.append("\n| variable | type | default | what it does |\n|---|---|---|---|\n")
        parts.append("\n".join(rows(model)) + "\n")
    return "".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if docs/configuration.md is stale")
    opts = parser.parse_args(argv)
    fresh = render()
    if opts.check:
        if not REFERENCE.exists() or REFERENCE.read_text() != fresh:
            print("docs/configuration.md is stale: run `make docs`", file=sys.stderr)
            return 1
        return 0
    REFERENCE.write_text(fresh)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
