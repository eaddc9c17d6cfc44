"""Defaults sized to the host: the cores the services keep for themselves and the torch
threads a node runs. Every value here is only a default: the services' settings override
it, and ``ferryman up --json`` reports what was chosen."""

from __future__ import annotations

import os
from pathlib import Path

SERVICE_CORE_SHARE = 4
"""The gRPC services (router, batcher, the node's own server) keep one core in this many,
at least one, when there is more than one: on a CPU-only box the model's threads would
otherwise take the core every hop needs, and each request would wait for a forward."""


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity, which containers restrict)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


CGROUP_MEMORY_LIMITS = (
    Path("/sys/fs/cgroup/memory.max"),
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
)
"""Where cgroup v2, then v1, state a container's memory limit."""


def usable_memory() -> int:
    """Bytes of host memory this process may use: the machine's, or its container's limit
    when that is lower (what Kubernetes' ``resources.limits.memory`` sets)."""
    physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    for path in CGROUP_MEMORY_LIMITS:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            return min(physical, int(text))
    return int(physical)


def service_cores(cores: int) -> int:
    """Cores left to the services on a host with ``cores``."""
    return 0 if cores <= 1 else max(1, cores // SERVICE_CORE_SHARE)


def node_torch_threads(cores: int, nodes: int = 1) -> int:
    """torch intra-op threads for each of ``nodes`` CPU nodes sharing a host with ``cores``."""
    return max(1, (cores - service_cores(cores)) // max(1, nodes))
