"""job limits: unfinished jobs and job items per day, per tenant

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02 19:15:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("quota_policies") as batch:
        batch.add_column(sa.Column("jobs_in_flight", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("job_items_per_day", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("quota_policies") as batch:
        batch.drop_column("job_items_per_day")
        batch.drop_column("jobs_in_flight")
