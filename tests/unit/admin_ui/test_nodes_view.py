"""The Nodes page's rows from nodes' own reports: memory used of total, and each version's
state and the memory it holds, node by node."""

from __future__ import annotations

from datetime import datetime

from ferryman.v1 import node_pb2
from ferryman_server.admin_ui.views.nodes import GIB, MIB, budget, fleet_rows, memory, placed_rows
from ferryman_server.registry.tables import AuditEvent


def test_what_is_loaded_where_with_the_memory_each_holds() -> None:
    info = node_pb2.NodeInfoResponse(
        memory_total=24 * GIB,
        memory_used=int(1.5 * GIB),
        memory_budget=2 * GIB,
        versions=[
            node_pb2.LoadedVersion(
                model="smollm2",
                version="1",
                state=node_pb2.VERSION_STATE_SERVING,
                memory_bytes=900 * MIB,
                pinned=True,
            ),
            node_pb2.LoadedVersion(model="mlp", version="1", state=node_pb2.VERSION_STATE_FAILED),
        ],
    )
    assert memory(info) == "1.5 / 24.0 GiB"
    assert memory(None) == ""
    info.versions[1].idle_for.FromSeconds(42)
    assert budget(info) == "0.88 / 2.00 GiB"
    assert placed_rows({"node-1": info}) == [
        {
            "node": "node-1",
            "version": "mlp:1",
            "state": "failed",
            "memory": "",
            "how": "on demand",
            "idle s": "42",
        },
        {
            "node": "node-1",
            "version": "smollm2:1",
            "state": "serving",
            "memory": "900 MiB",
            "how": "pinned",
            "idle s": "0",
        },
    ]


def test_loads_on_demand_and_evictions_from_the_audit_log() -> None:
    at = datetime(2026, 12, 4, 15, 0, 0)
    events = [
        AuditEvent(
            revision=3,
            actor="node:n1",
            action="node.load",
            entity="placement",
            entity_key="big:c@n1",
            detail={"bytes": 128 * MIB, "evicted": ["big:a"]},
            created_at=at,
        ),
        AuditEvent(
            revision=2,
            actor="node:n1",
            action="node.evict",
            entity="placement",
            entity_key="big:a@n1",
            detail={"bytes": 130 * MIB, "for": "big:c"},
            created_at=at,
        ),
        AuditEvent(revision=1, actor="test", action="tenant.create", entity="tenant", entity_key="acme"),
    ]
    assert fleet_rows(events) == [
        {
            "when": "2026-12-04 15:00:00",
            "what": "loaded on demand",
            "version @ node": "big:c@n1",
            "memory": "128 MiB",
            "for": "",
        },
        {
            "when": "2026-12-04 15:00:00",
            "what": "evicted",
            "version @ node": "big:a@n1",
            "memory": "130 MiB",
            "for": "big:c",
        },
    ]
