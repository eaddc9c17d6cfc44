"""Batcher scopes that are not tenants. No tenant can take these names (the registry's names
start with a letter or digit), and only routers, with the service token, submit items."""

from __future__ import annotations

SHADOW_SCOPE = "~shadow"
"""Shadow copies of tenants' requests (a route's shadow version): their own fair share and
coalescing scope."""

BACKGROUND = "~"
"""Scopes starting with this run only in capacity real tenants leave: never while a tenant's
work waits for the replica, never in a replica's last free slot, and never counted as an
active tenant (they shrink nobody's share). Between themselves they share fairly."""


def job_scope(tenant: str) -> str:
    """The batcher scope of a tenant's job items: background, fair between tenants."""
    return f"{BACKGROUND}job:{tenant}"


def is_background(scope: str) -> bool:
    return scope.startswith(BACKGROUND)
