"""Dead letters and the audit log: searchable tables."""

from __future__ import annotations

import json

import streamlit as st

from ferryman_server.admin_ui.context import Console

ROWS = 500


def _matches(row: dict[str, object], needle: str) -> bool:
    return not needle or needle.lower() in json.dumps(row, default=str).lower()


def _table(rows: list[dict[str, object]], needle: str) -> None:
    """The rows that match the search, and how many of the newest ones that is."""
    shown = [r for r in rows if _matches(r, needle)]
    st.caption(f"{len(shown)} of the newest {len(rows)}")
    st.dataframe(shown, hide_index=True, width="stretch")


def dead_letters(ctx: Console) -> None:
    st.header("Dead letters")
    needle = st.text_input("Search", key="dead_search", placeholder="model, tenant, request id, error...")
    rows = [
        {
            "time": d.created_at,
            "model": d.model,
            "version": d.version,
            "tenant": d.tenant,
            "request id": d.request_id,
            "input sha256": d.input_sha256,
            "error": d.error,
        }
        for d in ctx.reader.dead_letters(limit=ROWS)
    ]
    _table(rows, needle)


def audit_log(ctx: Console) -> None:
    st.header("Audit log")
    needle = st.text_input("Search", key="audit_search", placeholder="action, actor, entity...")
    rows = [
        {
            "time": e.created_at,
            "revision": e.revision,
            "actor": e.actor,
            "action": e.action,
            "entity": f"{e.entity}:{e.entity_key}",
            "detail": json.dumps(e.detail, default=str),
        }
        for e in ctx.reader.audit_events(limit=ROWS)
    ]
    _table(rows, needle)
