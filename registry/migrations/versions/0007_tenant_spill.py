"""tenant spill: a tenant's requests refused for load are accepted as durable jobs

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03 07:20:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.add_column(sa.Column("spill_to_job", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("spill_to_job")
