"""Fake nodes and a replica directory over them (no sockets), for the dispatcher's and the
generation relay's unit tests."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass, field

import grpc

from ferryman.errors import Reason, make_status, ok_status
from ferryman.v1 import batcher_pb2, node_pb2
from ferryman_server.batcher.dispatcher import Dispatcher
from ferryman_server.batcher.entries import Entry
from ferryman_server.batcher.metrics import BatcherMetrics
from ferryman_server.batcher.node_client import NodeCallError, NodeClient
from ferryman_server.batcher.replicas import PowerOfTwoChoices, ReplicaDirectory, ReplicaSource
from ferryman_server.batcher.service import BatcherService
from ferryman_server.batcher.settings import BatcherSettings
from ferryman_server.kernel.security import Security
from ferryman_server.registry.snapshot import NodeVersions
from ferryman_server.registry.tables import DeadLetter, ModelVersion

KEY = "m:1"
NODES = ("n1", "n2")


@dataclass
class FakeNode:
    """A node that answers, fails with a gRPC code, or fails every batch holding a poison item
    as a model error (as a real node fails the whole group the model raised on)."""

    name: str
    fail: grpc.StatusCode | None = None
    calls: list[list[str]] = field(default_factory=list)
    hung: bool = False
    """Answers nothing at all, batches nor probes (a SIGSTOPped process)."""
    slow_s: float = 0.0
    """Takes this long per batch, answering probes meanwhile (a long input, a busy box)."""
    probes: int = 0
    generations: list[str] = field(default_factory=list)
    """Request ids of the generations it was asked for."""
    dies_after: int | None = None
    """Generations fail UNAVAILABLE after this many events (the node died mid-stream)."""
    capacity: int = 2
    """Batches it says (NodeInfo) it computes at once."""
    device: str = "cuda:0"
    """The device it says it computes on."""
    budget: int = 0
    """The memory budget it reports (NodeInfo)."""
    held: dict[str, int] = field(default_factory=dict)
    """Versions it loaded by LoadModel, with the bytes each holds (NodeInfo reports them)."""
    loads: list[str] = field(default_factory=list)
    """The versions it was asked to load, in order."""
    load_answer: node_pb2.LoadModelResponse | None = None
    """What LoadModel answers (None: SERVING, holding what the request expected)."""
    load_s: float = 0.0
    """How long a load takes."""

    async def infer_batch(
        self, request: node_pb2.InferBatchRequest, timeout_s: float
    ) -> node_pb2.InferBatchResponse:
        ids = [item.request_id for item in request.items]
        self.calls.append(ids)
        if self.hung:
            await asyncio.Event().wait()  # until the dispatcher gives up on it (cancels)
        await asyncio.sleep(self.slow_s)
        if self.fail is not None:
            raise NodeCallError(self.fail, f"{self.name} says no")
        poisoned = any(i.startswith("poison") for i in ids)
        status = (
            make_status(grpc.StatusCode.INTERNAL, "ValueError: poison", reason=Reason.MODEL_ERROR)
            if poisoned
            else ok_status()
        )
        items = [node_pb2.ItemOutcome(request_id=i, status=status) for i in ids]
        return node_pb2.InferBatchResponse(items=items, batch_size=len(ids), node=self.name)

    async def node_info(self, timeout_s: float) -> node_pb2.NodeInfoResponse:
        self.probes += 1
        if self.hung:
            raise NodeCallError(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
        versions = [
            node_pb2.LoadedVersion(
                model=key.partition(":")[0],
                version=key.partition(":")[2],
                state=node_pb2.VERSION_STATE_SERVING,
                memory_bytes=size,
                evictable=True,
            )
            for key, size in self.held.items()
        ]
        return node_pb2.NodeInfoResponse(
            name=self.name,
            capacity=self.capacity,
            device=self.device,
            memory_budget=self.budget,
            versions=versions,
            lifecycle="READY",
        )

    async def load_model(
        self, request: node_pb2.LoadModelRequest, timeout_s: float
    ) -> node_pb2.LoadModelResponse:
        key = f"{request.spec.model}:{request.spec.version}"
        self.loads.append(key)
        await asyncio.sleep(self.load_s)
        if self.load_answer is not None:
            return self.load_answer
        self.held[key] = request.memory_bytes or 1
        return node_pb2.LoadModelResponse(state=node_pb2.VERSION_STATE_SERVING)

    async def generate(
        self, request: node_pb2.NodeGenerateRequest, timeout_s: float
    ) -> AsyncGenerator[node_pb2.GenerateEvent]:
        """Three tokens, or ``fail`` before the first, or UNAVAILABLE after ``dies_after``."""
        self.generations.append(request.request_id)
        if self.fail is not None:
            raise NodeCallError(self.fail, f"{self.name} says no")
        for i in range(GENERATED):
            if self.dies_after == i:
                raise NodeCallError(grpc.StatusCode.UNAVAILABLE, f"{self.name} died")
            yield node_pb2.GenerateEvent(token_ids=[i], completion_tokens=i + 1)

    async def close(self) -> None:
        return None


GENERATED = 3


class Registry:
    """Two nodes, both serving ``m:1``."""

    def revision(self) -> int:
        return 1

    def all_versions(self) -> list[tuple[str, ModelVersion]]:
        return [("m", ModelVersion(model_id=1, version="1", artifact_uri="", sha256="", format="python"))]

    def node_versions(self, heartbeat_timeout_s: float) -> NodeVersions:
        return NodeVersions(ready={KEY: [(name, f"{name}:1") for name in NODES]}, failed={})


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Rig:
    dispatcher: Dispatcher
    directory: ReplicaDirectory
    nodes: dict[str, FakeNode]
    results: dict[str, batcher_pb2.ItemResult]
    letters: list[DeadLetter]
    clock: Clock


class Letters:
    def __init__(self) -> None:
        self.letters: list[DeadLetter] = []

    def record(self, letter: DeadLetter, now: float) -> bool:
        self.letters.append(letter)
        return True


async def rig(registry: ReplicaSource | None = None, **settings: object) -> Rig:
    config = BatcherSettings(retry_backoff_s=0, **settings)  # type: ignore[arg-type]
    nodes = {name: FakeNode(name) for name in NODES}
    by_address = {f"{name}:1": node for name, node in nodes.items()}

    def connect(address: str) -> NodeClient:
        return by_address[address]

    clock = Clock()
    metrics = BatcherMetrics()
    directory = ReplicaDirectory(
        config,
        registry or Registry(),
        metrics,
        Security(),
        clock=clock,
        refresh_s=1.0,
        heartbeat_timeout_s=10.0,
        choice=PowerOfTwoChoices(random.Random(0)),
        connect=connect,
    )
    await directory.refresh()
    results: dict[str, batcher_pb2.ItemResult] = {}
    letters = Letters()

    def finish(entry: Entry, result: batcher_pb2.ItemResult) -> None:
        assert entry.request_id not in results, "an entry was finished twice"
        results[entry.request_id] = result

    dispatcher = Dispatcher(config, directory, metrics, letters, finish, clock=clock)
    return Rig(dispatcher, directory, nodes, results, letters.letters, clock)


async def real_time_batcher(
    settings: BatcherSettings, registry: ReplicaSource, nodes: Mapping[str, NodeClient] | None = None
) -> tuple[ReplicaDirectory, BatcherService]:
    """A batcher service on the real event loop and clock over ``registry`` and fake
    ``nodes`` (by name; none: nothing is dialled), its directory refreshed once."""
    metrics = BatcherMetrics()

    def connect(address: str) -> NodeClient:
        assert nodes is not None, f"no fake node for {address}"
        return nodes[address.split(":")[0]]

    directory = ReplicaDirectory(
        settings,
        registry,
        metrics,
        Security(),
        clock=time.monotonic,
        refresh_s=1.0,
        heartbeat_timeout_s=10.0,
        choice=PowerOfTwoChoices(random.Random(0)),
        connect=connect,
    )
    await directory.refresh()
    service = BatcherService(
        settings,
        directory,
        metrics,
        lambda finish: Dispatcher(settings, directory, metrics, Letters(), finish, clock=time.monotonic),
        clock=time.monotonic,
    )
    return directory, service
