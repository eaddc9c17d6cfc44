"""The registry every console test drives."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from console_app import console_registry

from ferryman_server.registry.reader import RegistryReader
from ferryman_server.registry.writer import RegistryWriter


@pytest.fixture
def registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[RegistryWriter, RegistryReader]]:
    yield from console_registry(tmp_path, monkeypatch)
