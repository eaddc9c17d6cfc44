"""python handlers named by the platform's one import name (ferryman_server.gpu_node...)

The platform's modules were importable under bare names (gpu_node, router...) before they
moved under ferryman_server; a stored handler of the platform's own (the demo MiniLM, the echo
handler) names its module the old way. Tenants' own handler modules are left as they are.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-05 03:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

RENAMED = {"gpu_node.demo.": "ferryman_server.gpu_node.demo."}
"""Old module prefix -> the one it has now: the platform ships handlers only in its demo
package, and any other name (a tenant's own ``router`` or ``gpu_node``) is the tenant's."""


def rename(mapping: dict[str, str]) -> None:
    versions = sa.table("model_versions", sa.column("handler", sa.String))
    for old, new in mapping.items():
        # LIKE's wildcard "_" is escaped: "gpu_node." must not match "gpuXnode.".
        pattern = old.replace("_", "\\_") + "%"
        op.execute(
            versions.update()
            .where(versions.c.handler.like(pattern, escape="\\"))
            .values(handler=sa.literal(new) + sa.func.substr(versions.c.handler, len(old) + 1))
        )


def upgrade() -> None:
    rename(RENAMED)


def downgrade() -> None:
    rename({new: old for old, new in RENAMED.items()})
