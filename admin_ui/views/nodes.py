"""Nodes: device, memory, what is loaded where and what each version holds, heartbeat,
outstanding work; drain a node."""

from __future__ import annotations

from datetime import UTC, datetime

import grpc
import streamlit as st

from ferryman.durations import seconds_of
from ferryman.v1 import node_pb2, node_pb2_grpc
from ferryman_server.admin_ui.context import Console
from ferryman_server.admin_ui.series.charts import Shown, Window, grid, range_picker
from ferryman_server.kernel.security import Security, sync_channel
from ferryman_server.registry.accounts import Permission
from ferryman_server.registry.snapshot import heartbeat_age_s
from ferryman_server.registry.tables import AuditEvent
from ferryman_server.registry.validation import RegistryError

NODE_INFO_TIMEOUT_S = 1.0
FLEET_EVENTS = 200
"""Recent audit events searched for loads on demand and evictions."""


MIB = 2**20
GIB = 2**30


def node_info(address: str, security: Security) -> node_pb2.NodeInfoResponse | None:
    """The node's own report (None when it does not answer)."""
    try:
        with sync_channel(address, security) as channel:
            info: node_pb2.NodeInfoResponse = node_pb2_grpc.NodeStub(channel).NodeInfo(
                node_pb2.NodeInfoRequest(), timeout=NODE_INFO_TIMEOUT_S, metadata=security.metadata()
            )
    except grpc.RpcError:
        return None
    return info


def memory(info: node_pb2.NodeInfoResponse | None) -> str:
    """``used / total GiB`` of a node's device (host memory on a CPU node)."""
    if info is None or not info.memory_total:
        return ""
    return f"{info.memory_used / GIB:.1f} / {info.memory_total / GIB:.1f} GiB"


def budget(info: node_pb2.NodeInfoResponse | None) -> str:
    """What a node's versions hold of the memory budget they share."""
    if info is None or not info.memory_budget:
        return ""
    held = sum(v.memory_bytes for v in info.versions)
    return f"{held / GIB:.2f} / {info.memory_budget / GIB:.2f} GiB"


FLEET_ACTIONS = ("node.load", "node.evict")
"""The audit log's record of what nodes loaded on demand and evicted to make room."""


def fleet_rows(events: list[AuditEvent]) -> list[dict[str, str]]:
    """Recent loads on demand and evictions, newest first."""
    return [
        {
            "when": e.created_at.strftime("%Y-%m-%d %H:%M:%S"),
            "what": "evicted" if e.action == "node.evict" else "loaded on demand",
            "version @ node": e.entity_key,
            "memory": f"{int(e.detail.get('bytes', 0)) / MIB:,.0f} MiB",
            "for": str(e.detail.get("for", "")),
        }
        for e in events
        if e.action in FLEET_ACTIONS
    ]


def placed_rows(infos: dict[str, node_pb2.NodeInfoResponse]) -> list[dict[str, str]]:
    """Each version on each answering node: its state and the memory it holds there."""
    return [
        {
            "node": node,
            "version": f"{v.model}:{v.version}",
            "state": node_pb2.VersionState.Name(v.state).removeprefix("VERSION_STATE_").lower(),
            "memory": f"{v.memory_bytes / MIB:,.0f} MiB" if v.memory_bytes else "",
            "how": "pinned" if v.pinned else "on demand",
            "idle s": f"{seconds_of(v.idle_for):,.0f}",
        }
        for node, info in sorted(infos.items())
        for v in sorted(info.versions, key=lambda v: (v.model, v.version))
    ]


CHARTS = [
    Shown("batching", "Node batches per second by version"),
    Shown("batching", "Node compute p99"),
    Shown("overview", "Nodes up"),
    Shown("overview", "Breakers open"),
]


def history(ctx: Console, range_s: float) -> None:
    """Work and health over time: batches, compute time, nodes up, breakers open."""
    assert ctx.source is not None
    window = Window.ending_now(range_s, ctx.settings.scrape_interval_s)
    grid(ctx.source, CHARTS, window, {}, key="node_chart")


def render(ctx: Console) -> None:
    st.header("Nodes")
    nodes = ctx.reader.nodes()
    if ctx.source is not None:
        st.fragment(history, run_every=ctx.settings.refresh_s)(ctx, range_picker("nodes_range"))
    if not nodes:
        st.info("No node has registered yet.")
        return
    now = datetime.now(UTC)
    rows = []
    infos: dict[str, node_pb2.NodeInfoResponse] = {}
    for node in nodes:
        info = node_info(node.address, ctx.security) if node.lifecycle in ("READY", "DRAINING") else None
        if info is not None:
            infos[node.name] = info
        rows.append(
            {
                "name": node.name,
                "lifecycle": node.lifecycle,
                "device": node.device,
                "memory used / total": memory(info),
                "versions / budget": budget(info),
                "address": node.address,
                "loaded": ", ".join(node.loaded_versions),
                "heartbeat s ago": round(heartbeat_age_s(node, now), 1),
                "batches in flight": sum(v.in_flight for v in info.versions) if info else None,
            }
        )
    st.dataframe(rows, hide_index=True, width="stretch")
    if infos:
        st.subheader("What is loaded where")
        st.caption("Memory: what each version added as it loaded, a causal LM's reserved KV cache included.")
        st.table(placed_rows(infos))
    moves = fleet_rows(ctx.reader.audit_events(limit=FLEET_EVENTS))
    if moves:
        st.subheader("Loads on demand and evictions")
        st.caption("A version placed nowhere loads where a request wants it; the least recently used goes.")
        st.table(moves)
    ready = [n.name for n in nodes if n.lifecycle == "READY"]
    if ready and ctx.can(Permission.OPERATE):
        chosen = st.selectbox("Node", ready, key="drain_node")
        st.caption("Draining stops new batches to the node; its in-flight batches finish.")
        if st.button("Drain", key="drain", type="primary"):
            try:
                ctx.writer(Permission.OPERATE).set_node_lifecycle(chosen, "DRAINING")
                st.success(f"{chosen} is draining")
            except RegistryError as exc:
                st.error(str(exc))
