"""The data dir's shared service token: one value for every process that starts at once,
never empty, readable by its owner only."""

from __future__ import annotations

import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from ferryman_server.kernel.security import TOKEN_FILE, shared_token

PROCESSES = 16
WORKERS = 8
WARM_S = 0.5


@pytest.mark.slow  # left out of make test-fast: eight processes started at once
def test_processes_starting_together_share_one_nonempty_token(tmp_path: Path) -> None:
    # Spawned, not forked: the test process has gRPC and torch threads a fork must not copy.
    # One pool for every attempt (each spawn imports ferryman, a second or more apiece), its
    # processes started and warm before the first attempt, so their calls race each other.
    with ProcessPoolExecutor(WORKERS, mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(time.sleep, [WARM_S] * WORKERS))  # one task each: every process spawned
        for attempt in range(3):
            data_dir = tmp_path / str(attempt)
            tokens = set(pool.map(shared_token, [data_dir] * PROCESSES))
            assert len(tokens) == 1 and "" not in tokens
            assert (data_dir / TOKEN_FILE).stat().st_mode & 0o777 == 0o600
            assert [p.name for p in data_dir.iterdir()] == [TOKEN_FILE]  # no temporary files left
