"""jobs in the registry database: durable jobs and their items without Redis

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03 07:35:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("key", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("tenant", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("job_id", sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
        sa.Column("model", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("version", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("state", sa.Integer(), nullable=False),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("succeeded", sa.Integer(), nullable=False),
        sa.Column("failed", sa.Integer(), nullable=False),
        sa.Column("cost", sa.Float(), nullable=False),
        sa.Column("created", sa.Float(), nullable=False),
        sa.Column("expires", sa.Float(), nullable=False),
        sa.Column("finished", sa.Float(), nullable=False),
        sa.Column("digest", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("parameters", sa.JSON(), nullable=False),
        sa.Column("price", sa.Float(), nullable=False),
        sa.Column("price_1k", sa.Float(), nullable=False),
        sa.Column("uncharged", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("key"),
    )
    op.create_index(op.f("ix_jobs_tenant"), "jobs", ["tenant"])
    op.create_index(op.f("ix_jobs_created"), "jobs", ["created"])
    op.create_index(op.f("ix_jobs_uncharged"), "jobs", ["uncharged"])
    op.create_table(
        "job_items",
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("job_key", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.Column("done", sa.Boolean(), nullable=False),
        sa.Column("claimed_by", sqlmodel.sql.sqltypes.AutoString(length=128), nullable=True),
        sa.Column("claimed_at", sa.Float(), nullable=True),
        sa.Column("result", sa.LargeBinary(), nullable=True),
        sa.PrimaryKeyConstraint("seq"),
        sa.UniqueConstraint("job_key", "idx", name="uq_job_item"),
    )
    op.create_index(op.f("ix_job_items_job_key"), "job_items", ["job_key"])
    op.create_index(op.f("ix_job_items_done"), "job_items", ["done"])


def downgrade() -> None:
    op.drop_table("job_items")
    op.drop_table("jobs")
