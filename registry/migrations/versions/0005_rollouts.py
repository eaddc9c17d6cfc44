"""rollouts, shadow traffic and feedback: progressive delivery of model versions

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02 18:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def _text(length: int) -> sqlmodel.sql.sqltypes.AutoString:
    return sqlmodel.sql.sqltypes.AutoString(length=length)


def upgrade() -> None:
    with op.batch_alter_table("routes") as batch:
        batch.add_column(sa.Column("shadow_version", _text(64), nullable=False, server_default=""))
        batch.add_column(sa.Column("shadow_percent", sa.Integer(), nullable=False, server_default="0"))
    op.create_table(
        "rollouts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("model", _text(64), nullable=False),
        sa.Column("active_model", _text(64), nullable=True),
        sa.Column("baseline", _text(64), nullable=False),
        sa.Column("candidate", _text(64), nullable=False),
        sa.Column("steps", sa.JSON(), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("state", _text(16), nullable=False),
        sa.Column("dwell_s", sa.Float(), nullable=False),
        sa.Column("gates", sa.JSON(), nullable=False),
        sa.Column("nodes", sa.JSON(), nullable=False),
        sa.Column("step_started_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.Column("last_check", sa.JSON(), nullable=False),
        sa.Column("reason", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("updated_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("active_model"),
    )
    with op.batch_alter_table("rollouts") as batch:
        batch.create_index(batch.f("ix_rollouts_model"), ["model"], unique=False)
        batch.create_index(batch.f("ix_rollouts_state"), ["state"], unique=False)
    op.create_table(
        "feedback",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("tenant", _text(64), nullable=False),
        sa.Column("request_id", _text(128), nullable=False),
        sa.Column("model", _text(64), nullable=False),
        sa.Column("version", _text(64), nullable=False),
        sa.Column("bucket", sa.Integer(), nullable=False),
        sa.Column("metric", _text(64), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("tenant", "request_id", "metric", name="uq_feedback_once"),
    )
    with op.batch_alter_table("feedback") as batch:
        batch.create_index(batch.f("ix_feedback_model"), ["model"], unique=False)
        batch.create_index(batch.f("ix_feedback_created_at"), ["created_at"], unique=False)


def downgrade() -> None:
    op.drop_table("feedback")
    op.drop_table("rollouts")
    with op.batch_alter_table("routes") as batch:
        batch.drop_column("shadow_percent")
        batch.drop_column("shadow_version")
