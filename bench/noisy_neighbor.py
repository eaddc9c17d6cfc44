"""A light tenant's goodput alone and beside heavy ones, on ``ferryman up --nodes 1``.

Each heavy tenant (the demo key, and ``--heavy-tenants`` - 1 more) keeps ``--heavy``
MiniLM requests of 32 texts of 4 KB each in flight (~1.3 s of compute per request on
2 cores); the light tenant (created here) sends ``--rate`` requests per second to
``--model`` for ``--seconds``, open loop, each with ``--deadline``. Goodput is answers
within the deadline; the light tenant's inputs are new each phase, so the batcher's
cache answers none of them.

    python -m bench.noisy_neighbor [--model mlp] [--rate 100] [--seconds 8] [--deadline 0.25]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ferryman.net import free_port
from ferryman.sdk.client import AsyncClient
from ferryman.sdk.errors import FerrymanError
from gpu_node.demo.mlp import IN_FEATURES
from registry.db import make_engine
from registry.writer import RegistryWriter

HEAVY_TEXTS = 32
HEAVY_TEXT_CHARS = 4000
HEAVY_TIMEOUT_S = 60.0
WARM_S = 3.0
STOP_TIMEOUT_S = 60.0
WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while", "seven", "wizards"]


def light_input(model: str, rng: random.Random) -> object:
    if model == "mlp":
        return np.asarray([[rng.random() for _ in range(IN_FEATURES)]], np.float32)
    return [" ".join(rng.choices(WORDS, k=8))]


async def light(client: AsyncClient, args: argparse.Namespace, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    latencies: list[float] = []

    async def one() -> None:
        started = time.perf_counter()
        try:
            await client.predict(args.model, light_input(args.model, rng), timeout=args.deadline)
            latencies.append(time.perf_counter() - started)
        except FerrymanError:
            pass

    tasks = []
    start = time.perf_counter()
    sent = int(args.rate * args.seconds)
    for i in range(sent):
        await asyncio.sleep(max(0.0, start + i / args.rate - time.perf_counter()))
        tasks.append(asyncio.create_task(one()))
    await asyncio.gather(*tasks)
    latencies.sort()
    p99 = latencies[int(len(latencies) * 0.99)] * 1000 if latencies else float("nan")
    return {"sent": sent, "ok": len(latencies), "p99_ms": round(p99, 1)}


async def heavy(client: AsyncClient, workers: int, stop: asyncio.Event) -> int:
    rng = random.Random(0)
    done = 0

    async def worker() -> None:
        nonlocal done
        while not stop.is_set():
            texts = [" ".join(rng.choices(WORDS, k=900))[:HEAVY_TEXT_CHARS] for _ in range(HEAVY_TEXTS)]
            try:
                await client.predict("minilm", texts, timeout=HEAVY_TIMEOUT_S)
                done += 1
            except FerrymanError:
                await asyncio.sleep(0.1)

    await asyncio.gather(*(worker() for _ in range(workers)))
    return done


async def run(
    router: str, heavy_keys: list[str], light_key: str, args: argparse.Namespace
) -> dict[str, object]:
    light_client = AsyncClient(router, light_key, retries=0)
    heavy_clients = [AsyncClient(router, key, retries=0) for key in heavy_keys]
    for _ in range(150):  # until the router has seen the new key
        try:
            await light_client.predict(args.model, light_input(args.model, random.Random()), timeout=30)
            break
        except FerrymanError:
            await asyncio.sleep(0.2)
    alone = await light(light_client, args, seed=1)
    stop = asyncio.Event()
    flooding = [asyncio.create_task(heavy(client, args.heavy, stop)) for client in heavy_clients]
    await asyncio.sleep(WARM_S)
    beside = await light(light_client, args, seed=2)
    stop.set()
    heavy_done = [await task for task in flooding]
    for client in (light_client, *heavy_clients):
        await client.close()
    return {"alone": alone, "beside": beside, "heavy_answers": heavy_done}


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
    with tempfile.TemporaryDirectory() as data:
        router = f"127.0.0.1:{free_port()}"
        env = {**os.environ, "FERRYMAN_DATA_DIR": data, "FERRYMAN_LOG_LEVEL": "WARNING"}
        env.pop("FERRYMAN_DATABASE_URL", None)
        up = subprocess.Popen(
            [sys.executable, "-m", "ferryman", "up", "--json", "--nodes", "1", "--listen", router],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        try:
            assert up.stdout is not None
            info = json.loads(up.stdout.readline())
            engine = make_engine(f"sqlite:///{Path(data) / 'registry.db'}")
            writer = RegistryWriter(engine, actor="bench")
            light_key = writer.create_tenant("light").plaintext
            heavy_keys = [info["api_key"]]
            heavy_keys += [writer.create_tenant(f"heavy-{i}").plaintext for i in range(1, args.heavy_tenants)]
            engine.dispose()
            print(json.dumps(asyncio.run(run(router, heavy_keys, light_key, args))))
        finally:
            up.send_signal(signal.SIGINT)
            up.wait(STOP_TIMEOUT_S)


if __name__ == "__main__":
    main()
