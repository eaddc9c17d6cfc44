"""model access: models are private to their owners unless published

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 09:40:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("models") as batch:
        batch.add_column(sa.Column("published", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("owners", sa.JSON(), nullable=False, server_default="[]"))


def downgrade() -> None:
    with op.batch_alter_table("models") as batch:
        batch.drop_column("owners")
        batch.drop_column("published")
