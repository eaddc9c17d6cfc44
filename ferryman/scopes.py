"""Batcher scopes that are not tenants. No tenant can take these names (the registry's names
start with a letter or digit), and only routers, with the service token, submit items."""

from __future__ import annotations

SHADOW_SCOPE = "~shadow"
"""Shadow copies of tenants' requests (a route's shadow version): their own fair share and
coalescing scope."""

BACKGROUND_SCOPES = frozenset({SHADOW_SCOPE})
"""Scopes whose items run only in capacity real tenants leave: never while a tenant's work
waits for the replica, never in a replica's last free slot, and never counted as an active
tenant (they shrink nobody's share)."""
