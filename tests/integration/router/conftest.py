"""One end-to-end platform per test session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from router_platform import E2E, run_e2e


@pytest.fixture(scope="session")
def e2e(tmp_path_factory: pytest.TempPathFactory) -> Iterator[E2E]:
    with run_e2e(tmp_path_factory.mktemp("e2e")) as platform:
        yield platform
