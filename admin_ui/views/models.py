"""Models: versions with status, artifact, checksum and IO schema; register a version."""

from __future__ import annotations

import json

import streamlit as st

from ferryman_server.admin_ui.context import Console
from ferryman_server.registry.accounts import Permission
from ferryman_server.registry.states import ModelFormat
from ferryman_server.registry.validation import RegistryError
from ferryman_server.registry.writer import VersionSpec

# Generative versions come with a tokenizer and chat template: registered from the CLI.
FORMATS = [f.value for f in ModelFormat if f != ModelFormat.CAUSAL_LM]


def render(ctx: Console) -> None:
    st.header("Models")
    timeout = ctx.common.heartbeat_timeout_s
    nodes = ctx.reader.node_versions(timeout)
    failed, ready = nodes.failed, nodes.ready
    for model in ctx.reader.models():
        st.subheader(model.name)
        if model.description:
            st.text(model.description)  # plain text: a description is never markup
        for row in ctx.reader.versions(model.name):
            failures = failed.get(f"{model.name}:{row.version}", [])
            status = "FAILED" if failures and not ready.get(f"{model.name}:{row.version}") else row.status
            with st.expander(f"{model.name}:{row.version} — {status}"):
                for node, reason in failures:
                    st.text(f"failed on {node}: {reason}")  # a model's own words: plain text
                st.write(
                    f"format `{row.format}`, max batch {row.max_batch_size}, "
                    f"cacheable {row.cacheable}, shareable {row.shareable}"
                )
                # Plain text: a path or URI may hold markup (an image that a browser fetches).
                st.text(f"artifact {row.artifact_uri}")
                st.text(f"sha256 {row.sha256}")
                st.json(row.io_schema)
    if not ctx.can(Permission.MANAGE):
        return
    with st.form("register_version"):
        st.subheader("Register a version")
        name = st.text_input("Model", key="reg_model")
        version = st.text_input("Version", key="reg_version")
        artifact = st.text_input("Artifact path or file:// URI", key="reg_artifact")
        fmt = st.selectbox("Format", FORMATS, key="reg_format")
        handler = st.text_input("Handler (module:Class, python only)", key="reg_handler")
        schema = st.text_area("IO schema (JSON)", key="reg_schema")
        max_batch = st.number_input("Max batch size", min_value=1, value=32, key="reg_batch")
        if st.form_submit_button("Register", key="register_submit"):
            try:
                spec = VersionSpec(
                    model=name.strip(),
                    version=version.strip(),
                    artifact=artifact.strip(),
                    format=fmt,
                    io_schema=json.loads(schema or "{}"),
                    handler=handler.strip(),
                    max_batch_size=int(max_batch),
                )
                row = ctx.writer(Permission.MANAGE).register_version(spec)
                st.success(f"registered {name}:{version} ({row.status})")
            except json.JSONDecodeError as exc:
                st.error(f"the IO schema is not JSON: {exc}")
            except RegistryError as exc:
                st.error(str(exc))
