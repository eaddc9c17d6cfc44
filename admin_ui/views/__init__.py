"""Console pages: one module each, every one a ``render(console)`` function."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ferryman_server.admin_ui.context import Console
from ferryman_server.admin_ui.views import (
    jobs,
    models,
    nodes,
    overview,
    people,
    quotas,
    records,
    routing,
    tenants,
)
from ferryman_server.registry.accounts import Permission


@dataclass(frozen=True)
class Page:
    render: Callable[[Console], None]
    permission: Permission = Permission.VIEW
    """Who sees the page at all; what they may change on it, each page asks itself."""


PAGES: dict[str, Page] = {
    "Overview": Page(overview.render),
    "Tenants": Page(tenants.render),
    "Quotas": Page(quotas.render),
    "Models": Page(models.render),
    "Routing": Page(routing.render),
    "Nodes": Page(nodes.render),
    "Jobs": Page(jobs.render),
    "Dead letters": Page(records.dead_letters),
    "Audit log": Page(records.audit_log),
    "People": Page(people.render, Permission.MANAGE),
}
