"""Compute isolation on the whole platform (``ferryman up``: real gRPC, real torch models):
two tenants flooding the node with legal, heavy MiniLM requests (32 texts of 4 KB each;
more tenants than the node has batch slots) cannot push another tenant's goodput below
80% of what it gets alone, whether that tenant calls another model (``mlp``, tight
deadlines) or the same one; and each heavy tenant still gets node time."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ferryman.sdk.aio import AsyncClient
from ferryman_server.cli.bench.neighbors import LightLoad, ferryman_up, flood, goodput, until_served
from ferryman_server.kernel.net import free_port
from ferryman_server.registry.db import make_engine
from ferryman_server.registry.writer import RegistryWriter

# Left out of make test-fast: ferryman up under a minute of load.
pytestmark = pytest.mark.slow

HEAVY_WORKERS = 8
WARM_S = 3.0
MIN_SHARE = 0.8
MLP = LightLoad("mlp", rate=40.0, seconds=5.0, deadline_s=0.25)
SAME_MODEL = LightLoad("minilm", rate=2.0, seconds=5.0, deadline_s=5.0)


async def scenario(router: str, heavy_keys: list[str], light_key: str) -> dict[str, tuple[int, int]]:
    light = AsyncClient(router, light_key, retries=0)
    heavies = [AsyncClient(router, key, retries=0) for key in heavy_keys]
    for load in (MLP, SAME_MODEL):  # warm both paths, once the router knows the new key
        await until_served(light, load)
    alone = {load.model: (await goodput(light, load, seed=1)).ok for load in (MLP, SAME_MODEL)}
    stop = asyncio.Event()
    flooding = [asyncio.create_task(flood(h, HEAVY_WORKERS, stop, seed=i)) for i, h in enumerate(heavies)]
    await asyncio.sleep(WARM_S)
    beside = {load.model: (await goodput(light, load, seed=2)).ok for load in (MLP, SAME_MODEL)}
    stop.set()
    heavy_done = [await task for task in flooding]
    for client in (light, *heavies):
        await client.close()
    assert all(done > 0 for done in heavy_done), f"a heavy tenant got no node time: {heavy_done}"
    return {model: (alone[model], beside[model]) for model in alone}


def test_heavy_tenants_cannot_starve_another(tmp_path: Path) -> None:
    router = f"127.0.0.1:{free_port()}"
    with ferryman_up(tmp_path, router) as info:
        engine = make_engine(f"sqlite:///{tmp_path / 'registry.db'}")
        writer = RegistryWriter(engine, actor="test")
        light_key = writer.create_tenant("light").plaintext
        heavy_keys = [info["api_key"], writer.create_tenant("heavy").plaintext]
        engine.dispose()
        results = asyncio.run(scenario(router, heavy_keys, light_key))
    for model, (alone, beside) in results.items():
        assert alone > 0, f"{model}: nothing answered even alone"
        assert beside >= MIN_SHARE * alone, f"{model}: {beside} answers beside the heavy ones, {alone} alone"
