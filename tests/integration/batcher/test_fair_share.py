"""Compute isolation on the whole platform (``ferryman up``: real gRPC, real torch models):
two tenants flooding the node with legal, heavy MiniLM requests (32 texts of 4 KB each;
more tenants than the node has batch slots) cannot push another tenant's goodput below
80% of what it gets alone, whether that tenant calls another model (``mlp``, tight
deadlines) or the same one; and each heavy tenant still gets node time."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ferryman.net import free_port
from ferryman.sdk.client import AsyncClient
from ferryman.sdk.errors import FerrymanError
from gpu_node.demo.mlp import IN_FEATURES
from registry.db import make_engine
from registry.writer import RegistryWriter

READY_TIMEOUT_S = 240.0
STOP_TIMEOUT_S = 60.0
HEAVY_WORKERS = 8
HEAVY_TEXTS = 32
HEAVY_TEXT_CHARS = 4000
HEAVY_TIMEOUT_S = 60.0
WARM_S = 3.0
KEY_VISIBLE_S = 30.0
MIN_SHARE = 0.8
WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "seven",
    "wizards",
    "quietly",
    "judge",
    "hexes",
]


@dataclass(frozen=True)
class Light:
    """An open-loop load: ``rate`` requests per second for ``seconds``, each with ``deadline_s``."""

    model: str
    rate: float
    seconds: float
    deadline_s: float

    def payload(self, rng: random.Random) -> object:
        if self.model == "mlp":
            return np.asarray([[rng.random() for _ in range(IN_FEATURES)]], np.float32)
        return [" ".join(rng.choices(WORDS, k=8))]


MLP = Light("mlp", rate=40.0, seconds=5.0, deadline_s=0.25)
SAME_MODEL = Light("minilm", rate=2.0, seconds=5.0, deadline_s=5.0)


async def goodput(client: AsyncClient, load: Light, seed: int) -> int:
    """Answers that came back OK within their deadline (inputs new to the batcher's cache)."""
    rng = random.Random(seed)
    ok = 0

    async def one() -> None:
        nonlocal ok
        try:
            await client.predict(load.model, load.payload(rng), timeout=load.deadline_s)
            ok += 1
        except FerrymanError:
            pass

    tasks = []
    start = time.perf_counter()
    for i in range(int(load.rate * load.seconds)):
        await asyncio.sleep(max(0.0, start + i / load.rate - time.perf_counter()))
        tasks.append(asyncio.create_task(one()))
    await asyncio.gather(*tasks)
    return ok


async def until_served(client: AsyncClient, load: Light) -> None:
    give_up = time.monotonic() + KEY_VISIBLE_S
    while True:
        try:
            await client.predict(load.model, load.payload(random.Random()), timeout=30)
            return
        except FerrymanError:
            if time.monotonic() > give_up:
                raise
            await asyncio.sleep(0.2)


async def flood(client: AsyncClient, stop: asyncio.Event) -> int:
    """The heavy tenant: closed-loop workers of 32 long texts each; returns answers."""
    rng = random.Random(2)
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

    await asyncio.gather(*(worker() for _ in range(HEAVY_WORKERS)))
    return done


async def scenario(router: str, heavy_keys: list[str], light_key: str) -> dict[str, tuple[int, int]]:
    light = AsyncClient(router, light_key, retries=0)
    heavies = [AsyncClient(router, key, retries=0) for key in heavy_keys]
    for load in (MLP, SAME_MODEL):  # warm both paths, once the router knows the new key
        await until_served(light, load)
    alone = {load.model: await goodput(light, load, seed=1) for load in (MLP, SAME_MODEL)}
    stop = asyncio.Event()
    flooding = [asyncio.create_task(flood(heavy, stop)) for heavy in heavies]
    await asyncio.sleep(WARM_S)
    beside = {load.model: await goodput(light, load, seed=2) for load in (MLP, SAME_MODEL)}
    stop.set()
    heavy_done = [await task for task in flooding]
    for client in (light, *heavies):
        await client.close()
    assert all(done > 0 for done in heavy_done), f"a heavy tenant got no node time: {heavy_done}"
    return {model: (alone[model], beside[model]) for model in alone}


def test_heavy_tenants_cannot_starve_another(tmp_path: Path) -> None:
    router = f"127.0.0.1:{free_port()}"
    env = {**os.environ, "FERRYMAN_DATA_DIR": str(tmp_path), "FERRYMAN_LOG_LEVEL": "WARNING"}
    env.pop("FERRYMAN_DATABASE_URL", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "ferryman", "up", "--json", "--nodes", "1", "--listen", router],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    lines: list[bytes] = []
    reader = threading.Thread(target=lambda: lines.append(proc.stdout.readline()) if proc.stdout else None)
    reader.start()
    reader.join(READY_TIMEOUT_S)
    try:
        assert lines and lines[0], "ferryman up printed nothing"
        info = json.loads(lines[0])
        engine = make_engine(f"sqlite:///{tmp_path / 'registry.db'}")
        writer = RegistryWriter(engine, actor="test")
        light_key = writer.create_tenant("light").plaintext
        heavy_keys = [info["api_key"], writer.create_tenant("heavy").plaintext]
        engine.dispose()
        results = asyncio.run(scenario(router, heavy_keys, light_key))
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(STOP_TIMEOUT_S) == 0
    for model, (alone, beside) in results.items():
        assert alone > 0, f"{model}: nothing answered even alone"
        assert beside >= MIN_SHARE * alone, f"{model}: {beside} answers beside the heavy one, {alone} alone"
