"""What CLI commands share: settings and the registry engine, built once per call."""

from __future__ import annotations

from functools import cache

from sqlalchemy import Engine

from ferryman_server.kernel.config import CommonSettings
from ferryman_server.registry.db import make_engine


@cache
def settings() -> CommonSettings:
    return CommonSettings()


@cache
def engine() -> Engine:
    return make_engine(settings().resolved_database_url())


def migrated_engine() -> Engine:
    """The registry engine, refusing to work on a database that is not migrated."""
    from ferryman_server.cli.output import fail
    from ferryman_server.registry.migrate import (  # alembic: only commands that write
        current_revision,
        head_revision,
    )

    eng = engine()
    if current_revision(eng) != head_revision():
        fail("the registry is not migrated to this version: run `ferryman db upgrade`")
    return eng
