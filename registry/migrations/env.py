"""Alembic environment: migrates the registry at the URL or connection it is given."""

from __future__ import annotations

from alembic import context
from sqlmodel import SQLModel

from ferryman_server.registry import tables  # noqa: F401  (registers the tables on SQLModel.metadata)
from ferryman_server.registry.db import make_engine

config = context.config
target_metadata = SQLModel.metadata


def run_migrations() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = make_engine(config.get_main_option("sqlalchemy.url") or "")
    with engine.connect() as conn:
        context.configure(connection=conn, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


run_migrations()
