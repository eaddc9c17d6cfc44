"""``ferryman models demo``: build the demo models locally and register them."""

from __future__ import annotations

from typing import Annotated

import typer

from ferryman_server.cli.context import migrated_engine, settings
from ferryman_server.cli.output import JsonFlag, console, emit, refusals

models_app = typer.Typer(help="Demo models.", no_args_is_help=True)


@models_app.command("demo")
def models_demo(
    as_json: JsonFlag = False,
    generate: Annotated[
        bool, typer.Option(help="SmolLM2 too (its GGUF converted once: a minute the first time).")
    ] = False,
) -> None:
    """Build mlp and minilm (and with --generate SmolLM2) under the data dir, register,
    route and place them."""
    from ferryman_server.gpu_node.demo.build import build_demo_artifacts, register_demo
    from ferryman_server.registry.reader import RegistryReader
    from ferryman_server.registry.writer import RegistryWriter

    engine = migrated_engine()
    specs = build_demo_artifacts(settings().data_dir / "models", generate)
    with refusals():
        added = register_demo(RegistryWriter(engine, actor="cli"), RegistryReader(engine), specs)
    emit(
        {"built": [f"{s.model}:{s.version}" for s in specs], "registered": added},
        as_json,
        lambda: console.print(f"demo models ready; newly registered: {', '.join(added) or 'none'}"),
    )
