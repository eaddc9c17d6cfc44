"""``ferryman up`` prints a new demo key each run and revokes the ones before it."""

from __future__ import annotations

from keys import tenant_of
from sqlalchemy import Engine

from ferryman_server.cli.up import DEMO_TENANT, demo_key
from ferryman_server.registry.reader import RegistryReader
from ferryman_server.registry.writer import RegistryWriter


def test_each_run_revokes_the_previous_demo_keys(registry_engine: Engine) -> None:
    writer, reader = RegistryWriter(registry_engine, actor="test"), RegistryReader(registry_engine)
    keys = [demo_key(writer, reader).plaintext for _ in range(3)]
    assert [tenant_of(registry_engine, k) for k in keys] == [None, None, DEMO_TENANT]
    (demo,) = [t for t in reader.tenants() if t.name == DEMO_TENANT]
    assert len(demo.active_keys) == 1
