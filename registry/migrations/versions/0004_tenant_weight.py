"""tenant weight: a tenant's share of contended compute (generation slots and tokens)

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02 11:40:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.add_column(sa.Column("weight", sa.Float(), nullable=False, server_default="1.0"))


def downgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("weight")
