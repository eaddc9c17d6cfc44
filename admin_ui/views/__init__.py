"""Console pages: one module each, every one a ``render(console)`` function."""

from __future__ import annotations

from collections.abc import Callable

from admin_ui.context import Console
from admin_ui.views import jobs, models, nodes, overview, quotas, records, routing, tenants

PAGES: dict[str, Callable[[Console], None]] = {
    "Overview": overview.render,
    "Tenants": tenants.render,
    "Quotas": quotas.render,
    "Models": models.render,
    "Routing": routing.render,
    "Nodes": nodes.render,
    "Jobs": jobs.render,
    "Dead letters": records.dead_letters,
    "Audit log": records.audit_log,
}
