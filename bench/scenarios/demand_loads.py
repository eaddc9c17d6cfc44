"""Loads on demand, as a tenant sees them: ``python -m bench.scenarios.demand_loads``.

The platform as ``ferryman up`` runs it, with two nodes whose memory budgets hold one big
version each (``FERRYMAN_NODE_MEMORY_BUDGET_BYTES``), and three big versions registered
and placed nowhere. The tenant calls them through the SDK in the order a, b, a, c, b:
the first call to a version no node serves waits for its load, the ones after it are
answered warm, and c and the second b each evict the least recently used version. Reports
each call's latency and what was evicted, with the warm latency beside it.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from bench.scenarios.platform import MODELS_DIR, PlatformSpec, ferryman
from ferryman.sdk import Client
from ferryman_server.registry.db import make_engine
from ferryman_server.registry.reader import RegistryReader
from ferryman_server.registry.writer import RegistryWriter, VersionSpec

MIB = 1 << 20
WIDTH = 64
HIDDEN = 500_000
"""128 MB of float32 weights a version."""
BUDGET = 200 * MIB
ORDER = ("a", "b", "a", "c", "b")
WARM_CALLS = 20
TIMEOUT_S = 120.0
SCHEMA = {
    "inputs": [{"name": "input", "dtype": "FP32", "shape": [WIDTH]}],
    "outputs": [{"name": "output", "dtype": "FP32", "shape": [1]}],
}


def big_version(name: str, seed: int) -> VersionSpec:
    """A 128 MB TorchScript model, built once into the scenarios' model cache."""
    path = MODELS_DIR / f"big-{name}.pt"
    if not path.exists():
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Linear(WIDTH, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 1)).eval()
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.jit.save(torch.jit.script(model), str(path))
    return VersionSpec(
        model=f"big-{name}",
        version="1",
        artifact=str(path),
        format="torchscript",
        io_schema=SCHEMA,
        max_batch_size=2,
        published=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    env = {"FERRYMAN_NODE_MEMORY_BUDGET_BYTES": str(BUDGET), "FERRYMAN_NODE_EVICT_AFTER_IDLE_S": "0"}
    with ferryman(PlatformSpec(nodes=2, models=("echo",), env=env)) as running:
        engine = make_engine(running.registry_url)
        writer = RegistryWriter(engine, actor="bench")
        for seed, name in enumerate(sorted(set(ORDER))):
            spec = big_version(name, seed)
            writer.register_version(spec)
            writer.set_route(spec.model, {"1": 100})
        x = np.random.default_rng(0).standard_normal((1, WIDTH), dtype=np.float32)
        rows = []
        with Client(running.address, api_key=running.key, timeout=TIMEOUT_S) as client:
            time.sleep(2.0)  # the router and batcher read the new versions
            for name in ORDER:
                started = time.perf_counter()
                client.predict(f"big-{name}", x)
                cold = time.perf_counter() - started
                warm_calls: list[float] = []
                for _ in range(WARM_CALLS):
                    started = time.perf_counter()
                    client.predict(f"big-{name}", x)
                    warm_calls.append(time.perf_counter() - started)
                rows.append((name, cold, statistics.median(warm_calls)))
        evicted = [
            e.entity_key.partition("@")[0]
            for e in reversed(RegistryReader(engine).audit_events(limit=100))
            if e.action == "node.evict"
        ]
        engine.dispose()
    print("| call | version | first call | warm p50 after it |")
    print("|---:|---|---:|---:|")
    for i, (name, cold, warm) in enumerate(rows, start=1):
        print(f"| {i} | big-{name} | {cold * 1000:,.0f} ms | {warm * 1000:,.1f} ms |")
    print(f"\nevicted, in order: {', '.join(evicted) or 'nothing'}")


if __name__ == "__main__":
    Path(MODELS_DIR).mkdir(parents=True, exist_ok=True)
    main()
