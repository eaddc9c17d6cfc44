"""Nodes: device, loaded versions, heartbeat, outstanding work; drain a node."""

from __future__ import annotations

from datetime import UTC, datetime

import grpc
import streamlit as st

from admin_ui.context import Console
from admin_ui.series.charts import Shown, Window, grid, range_picker
from ferryman.v1 import node_pb2, node_pb2_grpc
from ferryman_kernel.security import Security, sync_channel
from registry.accounts import Permission
from registry.snapshot import heartbeat_age_s
from registry.validation import RegistryError

NODE_INFO_TIMEOUT_S = 1.0


def in_flight(address: str, security: Security) -> int | None:
    """Batches running on the node now (None when it does not answer)."""
    try:
        with sync_channel(address, security) as channel:
            info = node_pb2_grpc.NodeStub(channel).NodeInfo(
                node_pb2.NodeInfoRequest(), timeout=NODE_INFO_TIMEOUT_S, metadata=security.metadata()
            )
    except grpc.RpcError:
        return None
    return int(sum(v.in_flight for v in info.versions))


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
    for node in nodes:
        live = node.lifecycle in ("READY", "DRAINING")
        rows.append(
            {
                "name": node.name,
                "lifecycle": node.lifecycle,
                "device": node.device,
                "address": node.address,
                "loaded": ", ".join(node.loaded_versions),
                "heartbeat s ago": round(heartbeat_age_s(node, now), 1),
                "batches in flight": in_flight(node.address, ctx.security) if live else None,
            }
        )
    st.dataframe(rows, hide_index=True, width="stretch")
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
