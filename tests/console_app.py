"""The console under Streamlit's AppTest against a real registry: the fixture and the
steps every console test takes."""

from __future__ import annotations

import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from ferryman_server import admin_ui
from ferryman_server.registry.db import make_engine
from ferryman_server.registry.migrate import upgrade
from ferryman_server.registry.reader import RegistryReader
from ferryman_server.registry.writer import RegistryWriter, VersionSpec

HTTP_OK = 200
APP = str(Path(admin_ui.__file__).resolve().parent / "app.py")
PASSWORD = "correct horse battery"
TIMEOUT_S = 30
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
"""Debian's Chromium, headless as root, on a machine with no network beyond loopback."""
EVERYONE_SEES = [
    "Overview",
    "Tenants",
    "Quotas",
    "Models",
    "Routing",
    "Nodes",
    "Jobs",
    "Dead letters",
    "Audit log",
]
"""The pages of every role, in the sidebar's order; admins also see People."""
SCHEMA = {
    "inputs": [{"name": "input", "dtype": "FP32", "shape": [4]}],
    "outputs": [{"name": "output", "dtype": "FP32", "shape": [4]}],
}


def console_url(tmp_path: Path) -> str:
    """The console tests' registry (``console_registry``) in a test's ``tmp_path``."""
    return f"sqlite:///{tmp_path / 'registry.db'}"


def console_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[RegistryWriter, RegistryReader]]:
    url = console_url(tmp_path)
    engine = make_engine(url)
    upgrade(engine)
    writer = RegistryWriter(engine, actor="test")
    artifact = tmp_path / "m.pt2"
    artifact.write_bytes(b"weights")
    for version in ("1", "2"):
        writer.register_version(
            VersionSpec(
                model="mlp", version=version, artifact=str(artifact), format="torch_export", io_schema=SCHEMA
            )
        )
    writer.set_route("mlp", {"1": 100})
    monkeypatch.setenv("FERRYMAN_DATABASE_URL", url)
    monkeypatch.setenv("FERRYMAN_ADMIN_PASSWORD", PASSWORD)
    st.cache_resource.clear()  # the console's registry connection is cached per process
    yield writer, RegistryReader(engine)
    st.cache_resource.clear()
    engine.dispose()


def logged_in(name: str = "admin", password: str = PASSWORD) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT_S).run()
    at.text_input(key="login_name").input(name)
    at.text_input(key="password").input(password)
    at.button(key="login_submit").click().run()
    assert not at.exception, at.exception
    return at


def open_page(at: AppTest, page: str) -> AppTest:
    at.sidebar.radio(key="page").set_value(page).run()
    assert not at.exception, at.exception
    return at


CONSOLE_START_S = 60.0
"""How long ``ferryman admin`` may take to answer its health check."""


def start_console(port: int, env: Mapping[str, str], ca: str = "") -> subprocess.Popen[bytes]:
    """``ferryman admin --port`` with ``env``, once its health check answers (over TLS,
    checked with ``ca``, when given; the process is killed and the test fails if not)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "ferryman_server.cli", "admin", "--port", str(port)],
        env=dict(env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + CONSOLE_START_S
    while not console_healthy(f"127.0.0.1:{port}", ca):
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise AssertionError("the console did not start")
        time.sleep(0.2)
    return proc


def console_healthy(address: str, ca: str = "") -> bool:
    scheme, context = ("https", ssl.create_default_context(cafile=ca)) if ca else ("http", None)
    try:
        with urllib.request.urlopen(
            f"{scheme}://{address}/_stcore/health", timeout=5, context=context
        ) as response:
            return bool(response.status == HTTP_OK)
    except OSError:
        return False
