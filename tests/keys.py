"""Which tenant an API key authenticates as, decided the way a router decides it."""

from __future__ import annotations

from sqlalchemy import Engine

from ferryman_server.registry.snapshot import load_snapshot
from ferryman_server.router.auth import authenticate


def tenant_of(engine: Engine, key: str) -> str | None:
    """The tenant ``key`` authenticates as on the registry's current snapshot; None when it
    is unknown, revoked or its tenant disabled."""
    tenant = authenticate(load_snapshot(engine), key)
    return tenant.name if tenant else None
