"""A light tenant's goodput alone and beside heavy ones, on ``ferryman up --nodes 1``.

Each heavy tenant (the demo key, and ``--heavy-tenants`` - 1 more) keeps ``--heavy``
MiniLM requests of 32 texts of 4 KB each in flight (~1.3 s of compute per request on
2 cores); the light tenant (created here) sends ``--rate`` requests per second to
``--model`` for ``--seconds``, open loop, each with ``--deadline``. Goodput is answers
within the deadline; the light tenant's inputs are new each phase, so the batcher's
cache answers none of them. The workload is ``ferryman_server.cli.bench.neighbors``.

    python -m bench.noisy_neighbor [--model mlp] [--rate 100] [--seconds 8] [--deadline 0.25]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import tempfile
from pathlib import Path

from ferryman.sdk.aio import AsyncClient
from ferryman_server.cli.bench.neighbors import LightLoad, ferryman_up, flood, goodput, until_served
from ferryman_server.kernel.net import free_port
from ferryman_server.registry.db import make_engine
from ferryman_server.registry.writer import RegistryWriter

WARM_S = 3.0


async def run(
    router: str, heavy_keys: list[str], light_key: str, load: LightLoad, workers: int
) -> dict[str, object]:
    light = AsyncClient(router, light_key, retries=0)
    heavies = [AsyncClient(router, key, retries=0) for key in heavy_keys]
    await until_served(light, load)
    alone = await goodput(light, load, seed=1)
    stop = asyncio.Event()
    flooding = [asyncio.create_task(flood(client, workers, stop, seed=i)) for i, client in enumerate(heavies)]
    await asyncio.sleep(WARM_S)
    beside = await goodput(light, load, seed=2)
    stop.set()
    heavy_done = [await task for task in flooding]
    for client in (light, *heavies):
        await client.close()
    return {
        "alone": dataclasses.asdict(alone),
        "beside": dataclasses.asdict(beside),
        "heavy_answers": heavy_done,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="mlp", choices=["mlp", "minilm"])
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--deadline", type=float, default=0.25)
    parser.add_argument("--heavy", type=int, default=12, help="heavy requests in flight per heavy tenant")
    parser.add_argument("--heavy-tenants", type=int, default=1, help="heavy tenants (the demo one and more)")
    args = parser.parse_args()
    load = LightLoad(args.model, args.rate, args.seconds, args.deadline)
    with tempfile.TemporaryDirectory() as data:
        router = f"127.0.0.1:{free_port()}"
        with ferryman_up(Path(data), router) as info:
            engine = make_engine(f"sqlite:///{Path(data) / 'registry.db'}")
            writer = RegistryWriter(engine, actor="bench")
            light_key = writer.create_tenant("light").plaintext
            heavy_keys = [info["api_key"]]
            heavy_keys += [writer.create_tenant(f"heavy-{i}").plaintext for i in range(1, args.heavy_tenants)]
            engine.dispose()
            print(json.dumps(asyncio.run(run(router, heavy_keys, light_key, load, args.heavy))))


if __name__ == "__main__":
    main()
