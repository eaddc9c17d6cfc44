"""Defaults sized to the host (``ferryman_server.kernel.host``) and a node's settings sized with them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ferryman_server.gpu_node.settings import NodeSettings
from ferryman_server.kernel import host
from ferryman_server.kernel.host import node_torch_threads, service_cores


def test_services_keep_a_core_in_four_and_nodes_share_the_rest() -> None:
    assert service_cores(1) == 0  # nothing to keep: the one core is everyone's
    assert [service_cores(c) for c in (2, 4, 8, 16)] == [1, 1, 2, 4]
    assert node_torch_threads(2) == 1
    assert node_torch_threads(16) == 12
    assert node_torch_threads(16, nodes=2) == 6
    assert node_torch_threads(2, nodes=4) == 1  # never below one


def test_node_settings_fill_only_what_was_left_to_the_host() -> None:
    assert NodeSettings(torch_threads=0).sized("cpu", cores=8).torch_threads == 6
    assert NodeSettings(torch_threads=2).sized("cpu", cores=8).torch_threads == 2
    # On a GPU the CPU threads stay torch's own choice.
    assert NodeSettings(torch_threads=0).sized("cuda", cores=8).torch_threads == 0


def test_usable_memory_is_the_containers_limit_when_lower(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    v2, v1 = tmp_path / "memory.max", tmp_path / "memory.limit_in_bytes"
    monkeypatch.setattr(host, "CGROUP_MEMORY_LIMITS", (v2, v1))
    assert host.usable_memory() == physical, "no cgroup file: the machine's"
    v2.write_text("max\n")
    v1.write_text(f"{2 << 30}\n")
    assert host.usable_memory() == min(physical, 2 << 30), "v2 unlimited: v1's limit"
    v2.write_text(f"{1 << 30}\n")
    assert host.usable_memory() == min(physical, 1 << 30)
    v2.write_text(f"{physical * 4}\n")
    assert host.usable_memory() == physical, "a limit above the machine's memory is the machine's"
