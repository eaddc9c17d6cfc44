"""The Nodes page's rows from nodes' own reports: memory used of total, and each version's
state and the memory it holds, node by node."""

from __future__ import annotations

from admin_ui.views.nodes import GIB, MIB, memory, placed_rows
from ferryman.v1 import node_pb2


def test_what_is_loaded_where_with_the_memory_each_holds() -> None:
    info = node_pb2.NodeInfoResponse(
        memory_total=24 * GIB,
        memory_used=int(1.5 * GIB),
        versions=[
            node_pb2.LoadedVersion(
                model="smollm2", version="1", state=node_pb2.VERSION_STATE_SERVING, memory_bytes=900 * MIB
            ),
            node_pb2.LoadedVersion(model="mlp", version="1", state=node_pb2.VERSION_STATE_FAILED),
        ],
    )
    assert memory(info) == "1.5 / 24.0 GiB"
    assert memory(None) == ""
    assert placed_rows({"node-1": info}) == [
        {"node": "node-1", "version": "mlp:1", "state": "failed", "memory": ""},
        {"node": "node-1", "version": "smollm2:1", "state": "serving", "memory": "900 MiB"},
    ]
