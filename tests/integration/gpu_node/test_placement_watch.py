"""A running node follows its placements after it started: a version placed while it serves
is SERVING there within a few refresh periods, and one taken back is unloaded (what a
caller loaded by LoadModel stays)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from batcher_platform import register, wait_for_replicas
from harness import ServiceThread
from internal import internal_channel, service_metadata
from node_helpers import node_settings

from ferryman.v1 import node_pb2, node_pb2_grpc
from ferryman_server.gpu_node.demo import echo
from ferryman_server.gpu_node.server import serve_node
from ferryman_server.gpu_node.slots import ModelSlot
from ferryman_server.gpu_node.versions import Versions
from ferryman_server.kernel.config import CommonSettings
from ferryman_server.registry.db import make_engine
from ferryman_server.registry.migrate import upgrade
from ferryman_server.registry.reader import RegistryReader
from ferryman_server.registry.writer import RegistryWriter

REFRESH_S = 0.2
UNLOAD_WAIT_S = 10.0
ECHO_HANDLER = "ferryman_server.gpu_node.demo.echo:EchoHandler"


def loaded(reader: RegistryReader) -> set[str]:
    return {v for n in reader.nodes() if n.name == "watcher" for v in n.loaded_versions}


def test_a_version_placed_after_start_is_loaded_and_unloaded_when_taken_back(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    engine = make_engine(url)
    upgrade(engine)
    writer, reader = RegistryWriter(engine, actor="test"), RegistryReader(engine)
    plain = echo.write_config(tmp_path / "echo.json")
    register(writer, "echo", "1", plain, "python", echo.SCHEMA, handler=ECHO_HANDLER, nodes=("watcher",))
    common = CommonSettings(data_dir=tmp_path, database_url=url)
    settings = node_settings(
        name="watcher", use_registry=True, heartbeat_interval_s=REFRESH_S, placement_refresh_s=REFRESH_S
    )
    node = ServiceThread(lambda stop, ready: serve_node(settings, common, stop, ready), "watcher")
    address = node.start()
    try:
        wait_for_replicas(reader, ("watcher",), {"echo:1"})
        # Placed while the node serves: before, it loaded placements only at start.
        register(
            writer, "echo", "late", plain, "python", echo.SCHEMA, handler=ECHO_HANDLER, nodes=("watcher",)
        )
        wait_for_replicas(reader, ("watcher",), {"echo:1", "echo:late"})
        assert writer.unplace("echo", "late", "watcher")
        assert not writer.unplace("echo", "late", "watcher"), "there is nothing left to take back"
        deadline = time.monotonic() + UNLOAD_WAIT_S
        while "echo:late" in loaded(reader):
            assert time.monotonic() < deadline, "the unplaced version is still loaded"
            time.sleep(REFRESH_S / 2)
        assert loaded(reader) == {"echo:1"}, "what is still placed keeps serving"
        stub = node_pb2_grpc.NodeStub(internal_channel(address))
        info = stub.NodeInfo(node_pb2.NodeInfoRequest(), metadata=service_metadata(), timeout=5)
        assert {f"{v.model}:{v.version}" for v in info.versions} == {"echo:1"}, "freed, not only hidden"
    finally:
        node.stop()
        engine.dispose()


def failed(reader: RegistryReader) -> dict[str, str]:
    return {k: r for n in reader.nodes() if n.name == "watcher" for k, r in n.failed_versions.items()}


def test_a_load_that_fails_unexpectedly_fails_its_version_and_the_watcher_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug in one load (not a LoadError) leaves that version FAILED with its reason (it
    stayed LOADING, and the exception ended the placement watcher silently): the node serves
    on and loads the next placement."""
    real = Versions._load_into

    async def buggy(self: Versions, slot: ModelSlot) -> None:
        if slot.spec.version == "buggy":
            raise RuntimeError("a bug in the load")
        await real(self, slot)

    monkeypatch.setattr(Versions, "_load_into", buggy)
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    engine = make_engine(url)
    upgrade(engine)
    writer, reader = RegistryWriter(engine, actor="test"), RegistryReader(engine)
    plain = echo.write_config(tmp_path / "echo.json")
    register(writer, "echo", "1", plain, "python", echo.SCHEMA, handler=ECHO_HANDLER, nodes=("watcher",))
    common = CommonSettings(data_dir=tmp_path, database_url=url)
    settings = node_settings(
        name="watcher", use_registry=True, heartbeat_interval_s=REFRESH_S, placement_refresh_s=REFRESH_S
    )
    node = ServiceThread(lambda stop, ready: serve_node(settings, common, stop, ready), "watcher")
    node.start()
    try:
        wait_for_replicas(reader, ("watcher",), {"echo:1"})
        for version in ("buggy", "next"):
            register(
                writer,
                "echo",
                version,
                plain,
                "python",
                echo.SCHEMA,
                handler=ECHO_HANDLER,
                nodes=("watcher",),
            )
        wait_for_replicas(reader, ("watcher",), {"echo:1", "echo:next"})
        deadline = time.monotonic() + UNLOAD_WAIT_S
        while "echo:buggy" not in failed(reader):
            assert time.monotonic() < deadline, failed(reader)
            time.sleep(REFRESH_S / 2)
        assert failed(reader)["echo:buggy"] == "RuntimeError: a bug in the load"
    finally:
        node.stop()
        engine.dispose()
