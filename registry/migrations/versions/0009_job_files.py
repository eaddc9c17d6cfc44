"""job files: uploaded batch inputs, when jobs live in the registry database

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03 07:45:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "job_files",
        sa.Column("key", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("tenant", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("file_id", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("filename", sqlmodel.sql.sqltypes.AutoString(length=256), nullable=False),
        sa.Column("created", sa.Float(), nullable=False),
        sa.Column("content", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("key"),
    )
    op.create_index(op.f("ix_job_files_tenant"), "job_files", ["tenant"])
    op.create_index(op.f("ix_job_files_created"), "job_files", ["created"])


def downgrade() -> None:
    op.drop_table("job_files")
