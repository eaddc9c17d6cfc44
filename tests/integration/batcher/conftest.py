"""The batcher tests' platform: one per session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from batcher_platform import Platform, run_platform


@pytest.fixture(scope="session")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    with run_platform(tmp_path_factory.mktemp("batcher-platform")) as running:
        yield running
