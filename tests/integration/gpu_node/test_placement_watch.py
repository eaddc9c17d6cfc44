"""A running node loads what is placed on it after it started: place a version while the
node serves, and it is SERVING on that node within a few refresh periods."""

from __future__ import annotations

from pathlib import Path

from batcher_platform import register, wait_for_replicas
from harness import ServiceThread
from node_helpers import node_settings

from ferryman.kernel.config import CommonSettings
from gpu_node.demo import echo
from gpu_node.server import serve_node
from registry.db import make_engine
from registry.migrate import upgrade
from registry.reader import RegistryReader
from registry.writer import RegistryWriter

REFRESH_S = 0.2
ECHO_HANDLER = "gpu_node.demo.echo:EchoHandler"


def test_a_version_placed_after_start_is_loaded(tmp_path: Path) -> None:
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
        # Placed while the node serves: before, it loaded placements only at start.
        register(
            writer, "echo", "late", plain, "python", echo.SCHEMA, handler=ECHO_HANDLER, nodes=("watcher",)
        )
        wait_for_replicas(reader, ("watcher",), {"echo:1", "echo:late"})
    finally:
        node.stop()
        engine.dispose()
