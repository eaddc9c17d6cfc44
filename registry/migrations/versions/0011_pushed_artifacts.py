"""artifacts pushed into the registry (ferryman model push), in chunks; the versions that
failed on each node, with why

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04 06:20:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Versions that failed on a node, with why: shown by model list, the console and in the
    # refusal a tenant gets instead of "no ready replica".
    with op.batch_alter_table("nodes") as nodes:
        nodes.add_column(
            sa.Column("failed_versions", sa.JSON(), nullable=False, server_default=sa.text("'{}'"))
        )
    op.create_table(
        "artifacts",
        sa.Column("sha256", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("kind", sqlmodel.sql.sqltypes.AutoString(length=8), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("chunks", sa.Integer(), nullable=False),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("sha256"),
    )
    op.create_table(
        "artifact_chunks",
        sa.Column("sha256", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("sha256", "seq"),
    )


def downgrade() -> None:
    op.drop_table("artifact_chunks")
    op.drop_table("artifacts")
    with op.batch_alter_table("nodes") as nodes:
        nodes.drop_column("failed_versions")
