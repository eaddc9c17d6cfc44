"""API keys from ``authorization: Bearer <key>`` metadata, checked against the cached config."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ferryman_server.registry.keys import matches, parse_prefix
from ferryman_server.registry.snapshot import ConfigSnapshot, TenantRecord

BEARER = "bearer "


def bearer_key(metadata: Iterable[Any] | None) -> str:
    for name, value in metadata or ():
        if name.lower() == "authorization" and isinstance(value, str) and value.lower().startswith(BEARER):
            return value[len(BEARER) :].strip()
    return ""


def authenticate(snapshot: ConfigSnapshot, key: str) -> TenantRecord | None:
    """The tenant of a valid, unrevoked key of an enabled tenant; None otherwise."""
    prefix = parse_prefix(key)
    record = snapshot.keys.get(prefix) if prefix else None
    if record is None or record.revoked or not matches(key, record.key_hash):
        return None
    tenant = snapshot.tenants.get(record.tenant)
    if tenant is None or tenant.disabled:
        return None
    return tenant
