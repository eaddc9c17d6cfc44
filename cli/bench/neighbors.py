"""Noisy neighbours: a light tenant's goodput beside heavy MiniLM tenants, on a local
``ferryman up`` (``bench/noisy_neighbor.py`` measures it, the compute-isolation test
asserts it).

Heavy tenants keep closed-loop MiniLM requests of 32 texts of 4 KB each in flight (each
~1.3 s of compute on 2 cores); the light tenant sends open-loop requests, each with its
deadline, with inputs new to the batcher's cache for every seed.
"""

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
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ferryman.sdk.aio import AsyncClient
from ferryman.sdk.errors import FerrymanError
from ferryman_server.kernel.net import free_port

HEAVY_MODEL = "minilm"
HEAVY_TEXTS = 32
HEAVY_TEXT_CHARS = 4000
HEAVY_WORDS_PER_TEXT = 900
HEAVY_TIMEOUT_S = 60.0
HEAVY_BACKOFF_S = 0.1
LIGHT_WORDS_PER_TEXT = 8
MLP_FEATURES = 512
"""The demo ``mlp``'s input width (``ferryman_server.gpu_node.demo.mlp.IN_FEATURES``)."""
KEY_VISIBLE_S = 30.0
KEY_RETRY_S = 0.2
UP_READY_TIMEOUT_S = 240.0
UP_STOP_TIMEOUT_S = 60.0
WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while", "seven", "wizards"]


@dataclass(frozen=True)
class LightLoad:
    """``rate`` requests per second to ``model`` for ``seconds``, each with ``deadline_s``."""

    model: str
    rate: float
    seconds: float
    deadline_s: float

    def payload(self, rng: random.Random) -> object:
        if self.model == "mlp":
            return np.asarray([[rng.random() for _ in range(MLP_FEATURES)]], np.float32)
        return [" ".join(rng.choices(WORDS, k=LIGHT_WORDS_PER_TEXT))]


@dataclass(frozen=True)
class Goodput:
    sent: int
    ok: int
    """Answers within the deadline."""
    p99_ms: float


async def until_served(client: AsyncClient, load: LightLoad) -> None:
    """One request answered (a key just created takes a registry refresh to be known)."""
    give_up = time.monotonic() + KEY_VISIBLE_S
    while True:
        try:
            await client.predict(load.model, load.payload(random.Random()), timeout=KEY_VISIBLE_S)
            return
        except FerrymanError:
            if time.monotonic() > give_up:
                raise
            await asyncio.sleep(KEY_RETRY_S)


async def goodput(client: AsyncClient, load: LightLoad, seed: int) -> Goodput:
    """Run ``load`` open loop; inputs come from ``seed`` (a new seed, new inputs)."""
    rng = random.Random(seed)
    latencies: list[float] = []

    async def one() -> None:
        started = time.perf_counter()
        try:
            await client.predict(load.model, load.payload(rng), timeout=load.deadline_s)
            latencies.append(time.perf_counter() - started)
        except FerrymanError:
            pass

    tasks = []
    start = time.perf_counter()
    sent = int(load.rate * load.seconds)
    for i in range(sent):
        await asyncio.sleep(max(0.0, start + i / load.rate - time.perf_counter()))
        tasks.append(asyncio.create_task(one()))
    await asyncio.gather(*tasks)
    latencies.sort()
    p99 = latencies[int(len(latencies) * 0.99)] * 1000 if latencies else float("nan")
    return Goodput(sent=sent, ok=len(latencies), p99_ms=round(p99, 1))


async def flood(client: AsyncClient, workers: int, stop: asyncio.Event, seed: int = 0) -> int:
    """A heavy tenant: ``workers`` closed-loop MiniLM requests until ``stop``; returns answers."""
    rng = random.Random(seed)
    done = 0

    async def worker() -> None:
        nonlocal done
        while not stop.is_set():
            texts = [
                " ".join(rng.choices(WORDS, k=HEAVY_WORDS_PER_TEXT))[:HEAVY_TEXT_CHARS]
                for _ in range(HEAVY_TEXTS)
            ]
            try:
                await client.predict(HEAVY_MODEL, texts, timeout=HEAVY_TIMEOUT_S)
                done += 1
            except FerrymanError:
                await asyncio.sleep(HEAVY_BACKOFF_S)

    await asyncio.gather(*(worker() for _ in range(workers)))
    return done


def start_up(
    data_dir: Path, listen: str, nodes: int = 1, generate: bool = False
) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    """``ferryman up --json`` as a child process on ``listen`` (its HTTP doors on a free
    port) with its data in ``data_dir``, and what it printed once ready; ending it is the
    caller's (it is killed if it never gets ready). ``generate``: with the generative demo."""
    env = {**os.environ, "FERRYMAN_DATA_DIR": str(data_dir), "FERRYMAN_LOG_LEVEL": "WARNING"}
    env.pop("FERRYMAN_DATABASE_URL", None)
    proc = subprocess.Popen(
        [
            *(
                sys.executable,
                "-m",
                "ferryman_server.cli",
                "up",
                "--json",
                "--nodes",
                str(nodes),
                "--listen",
                listen,
            ),
            *("--http-listen", f"127.0.0.1:{free_port()}"),
            "--generate" if generate else "--no-generate",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    lines: list[bytes] = []
    reader = threading.Thread(target=lambda: lines.append(proc.stdout.readline()) if proc.stdout else None)
    reader.start()
    reader.join(UP_READY_TIMEOUT_S)
    if not lines or not lines[0]:
        proc.kill()
        proc.wait()
        raise RuntimeError("ferryman up printed nothing")
    return proc, json.loads(lines[0])


@contextmanager
def ferryman_up(
    data_dir: Path, listen: str, nodes: int = 1, generate: bool = False
) -> Iterator[dict[str, Any]]:
    """``start_up``, yielding what it printed, stopped with Ctrl-C (SIGINT) on leaving."""
    proc, info = start_up(data_dir, listen, nodes, generate)
    try:
        yield info
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(UP_STOP_TIMEOUT_S)
    if code != 0:
        raise RuntimeError(f"ferryman up exited with code {code}")
