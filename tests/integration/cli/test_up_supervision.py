"""``ferryman up`` heals and cleans up after itself: kill -9 of a node or of the router
(which hosts the batcher) under load and the platform serves again within seconds (a node's death costs no
request: the other node takes its batches); SIGTERM to ``up`` alone leaves no process
behind; kill -9 of ``up`` takes its children down too."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
from figures import report
from sdk_load import SdkLoad

from ferryman.sdk.client import Client
from ferryman.sdk.errors import FerrymanError
from ferryman_server.cli.bench.neighbors import ferryman_up, start_up
from ferryman_server.kernel.net import free_port

# Left out of make test-fast: ferryman up, its children killed and restarted.
pytestmark = pytest.mark.slow

RECOVER_S = 90.0
"""A restarted node reloads its models; the rest come back in a few seconds."""
GONE_S = 30.0
LOAD_CLIENTS = 2
PAUSE_S = 0.02
ROLES = {"node-1": "--name node-1", "router": "serve router"}
"""``up``'s children by role; the batcher runs inside the router's process."""


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("up-supervised")


def child_pid(up_pid: int, role: str) -> int | None:
    """The live child of ``up`` playing ``role`` (its command line names it)."""
    for child in psutil.Process(up_pid).children():
        try:
            if ROLES[role] in " ".join(child.cmdline()) and child.status() != psutil.STATUS_ZOMBIE:
                return child.pid
        except psutil.NoSuchProcess:
            continue
    return None


def serving_again(router: str, key: str) -> float:
    """Seconds until a request is answered again."""
    started = time.monotonic()
    with Client(router, key, timeout=2.0, retries=0) as client:
        while time.monotonic() - started < RECOVER_S:
            try:
                client.predict("mlp", np.zeros((1, 512), np.float32))
                return time.monotonic() - started
            except FerrymanError:
                time.sleep(0.1)
    raise AssertionError(f"not serving {RECOVER_S} s after the kill")


@pytest.fixture(scope="module")
def up(data_dir: Path) -> Iterator[dict[str, Any]]:
    with ferryman_up(data_dir, f"127.0.0.1:{free_port()}", nodes=2) as info:
        yield info


@pytest.mark.parametrize("role", ["node-1", "router"])
def test_a_killed_child_is_restarted_and_the_platform_serves_again(up: dict[str, Any], role: str) -> None:
    victim = child_pid(up["pid"], role)
    assert victim is not None, f"no {role} under ferryman up"
    load = SdkLoad(up["router"], up["api_key"], clients=LOAD_CLIENTS, pause_s=PAUSE_S)
    time.sleep(1.0)
    os.kill(victim, signal.SIGKILL)
    recovered = serving_again(up["router"], up["api_key"])
    time.sleep(1.0)
    load.stop()
    successor = child_pid(up["pid"], role)
    assert successor is not None and successor != victim, f"{role} was not restarted"
    report(f"kill -9 {role}", serving_again_s=round(recovered, 2), answered=load.ok, failed=len(load.failed))
    assert load.ok > 0
    if role == "node-1":
        assert load.failed == [], "the other node takes a dead node's batches"


@contextmanager
def bare_up(data_dir: Path) -> Iterator[tuple[subprocess.Popen[bytes], dict[str, Any]]]:
    """``ferryman up --json`` whose ending the test decides (the process and its ready line)."""
    proc, info = start_up(data_dir, f"127.0.0.1:{free_port()}")
    try:
        yield proc, info
    finally:
        proc.kill()
        proc.wait()


def test_sigterm_to_up_alone_leaves_no_process_behind(data_dir: Path) -> None:
    with bare_up(data_dir) as (proc, info):
        children = [psutil.Process(p) for p in info["pids"].values()]
        assert set(info["pids"]) == {"node-1", "router", "rollouts", "console"}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(GONE_S) == 0
        _, alive = psutil.wait_procs(children, timeout=GONE_S)
        assert not alive, f"left running: {[p.pid for p in alive]}"


def test_children_stop_when_up_is_killed(data_dir: Path) -> None:
    with bare_up(data_dir) as (proc, info):
        children = [psutil.Process(p) for p in info["pids"].values()]
        proc.kill()
    _, alive = psutil.wait_procs(children, timeout=GONE_S)
    assert not alive, f"orphans still running after kill -9 of up: {[p.pid for p in alive]}"
