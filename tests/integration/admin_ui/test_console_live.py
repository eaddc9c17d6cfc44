"""The console as an operator keeps it open, in headless Chromium against ``ferryman up``
under steady traffic: log in, reload and stay logged in, see the Overview's charts fill
within 30 s without reloading, switch the time range, and watch a 90/10 canary. Every page
is screenshotted (``FERRYMAN_SCREENSHOT_DIR=docs/screenshots`` regenerates the docs')."""

from __future__ import annotations

import os
import re
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from services import unavailable

import ferryman
from ferryman.bench.neighbors import ferryman_up
from ferryman.kernel.net import free_port
from registry.db import make_engine
from registry.reader import RegistryReader
from registry.writer import QuotaLimits, RegistryWriter, VersionSpec

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PAGES = [
    "Overview",
    "Tenants",
    "Quotas",
    "Models",
    "Routing",
    "Nodes",
    "Jobs",
    "Dead letters",
    "Audit log",
    "People",
]
DATA_WITHIN_MS = 30_000
"""The issue's bar: charts show data this soon after login, with no reload."""
TRAFFIC_INTERVAL_S = 0.08
USERS = 40
"""Distinct sticky users: enough that a 10 % canary gets some of them."""


class Traffic:
    """Steady predictions on mlp (fresh inputs: nothing answered from the cache)."""

    def __init__(self, info: dict[str, Any]) -> None:
        self.client = ferryman.Client(info["router"], api_key=info["api_key"])
        self.stop = threading.Event()
        self.answered = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        rng = np.random.default_rng(0)
        n = 0
        while not self.stop.is_set():
            x = rng.random((1, 512), dtype=np.float32)
            try:
                self.client.predict("mlp", x, user=f"user-{n % USERS}", timeout=5)
                self.answered += 1
            except ferryman.FerrymanError:
                pass
            n += 1
            self.stop.wait(TRAFFIC_INTERVAL_S)


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[tuple[dict[str, Any], RegistryWriter]]:
    if shutil.which("chromium") is None:
        unavailable("chromium is not installed (apt-get install chromium)")
    with ferryman_up(tmp_path, f"127.0.0.1:{free_port()}", nodes=1) as info:
        engine = make_engine(f"sqlite:///{tmp_path / 'registry.db'}")
        writer = RegistryWriter(engine, actor="test")
        (v1,) = RegistryReader(engine).versions("mlp")
        writer.register_version(
            VersionSpec(
                model="mlp", version="2", artifact=v1.artifact_uri, format=v1.format, io_schema=v1.io_schema
            )
        )
        writer.place("mlp", "2")  # warm on the node before the canary gets weight
        writer.set_quota("demo", QuotaLimits(rpm=1200, tpm=100_000, cost_per_day_usd=1.0, burst=100))
        traffic = Traffic(info)
        traffic.thread.start()
        try:
            yield info, writer
        finally:
            traffic.stop.set()
            traffic.thread.join(10)
            engine.dispose()
        assert traffic.answered > 0


def caption(page: Any, title: str) -> Any:
    return page.get_by_text(re.compile(rf"^{re.escape(title)}, latest: "))


def test_the_console_an_operator_keeps_open(
    platform: tuple[dict[str, Any], RegistryWriter], tmp_path: Path
) -> None:
    from playwright.sync_api import expect, sync_playwright

    info, writer = platform
    shots = Path(os.environ.get("FERRYMAN_SCREENSHOT_DIR") or tmp_path / "screenshots")
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=CHROMIUM_ARGS)
        # Tall: Streamlit scrolls inside its main pane, so a screenshot shows one viewport.
        page = browser.new_page(viewport={"width": 1400, "height": 1700})
        page.goto(info["console_url"])
        page.get_by_label("Name").fill("admin")
        page.get_by_label("Password", exact=True).fill(info["console_password"])
        page.get_by_role("button", name="Log in").click()
        sidebar = page.get_by_test_id("stSidebar")
        expect(sidebar.get_by_text("admin (admin)")).to_be_visible(timeout=30_000)
        logged_in_at = time.monotonic()
        # The page's script writes the login cookie as the first run after login draws.
        page.wait_for_function("() => document.cookie.includes('ferryman_console=')", timeout=10_000)
        page.reload()  # the login survives it (a signed cookie naming a registry session)
        expect(sidebar.get_by_text("admin (admin)")).to_be_visible(timeout=30_000)
        assert page.get_by_label("Password", exact=True).count() == 0

        # Charts fill in place: no reload, no click.
        requests = caption(page, "Requests per second by model")
        expect(requests).to_contain_text(re.compile(r"mlp [1-9]"), timeout=DATA_WITHIN_MS)
        assert time.monotonic() - logged_in_at < DATA_WITHIN_MS / 1000 + 10
        expect(caption(page, "Latency p50 / p99")).to_contain_text(re.compile(r"p99 mlp \d"))
        expect(page.get_by_text("Nothing wrong right now.")).to_be_visible()
        page.screenshot(path=str(shots / "overview.png"), full_page=True)

        page.get_by_text("1 h", exact=True).click()
        expect(page.get_by_text(re.compile(r"^The last 1 h from"))).to_be_visible(timeout=15_000)
        expect(requests).to_contain_text(re.compile(r"mlp [1-9]"), timeout=15_000)

        writer.set_route("mlp", {"1": 90, "2": 10}, sticky="user")
        sidebar.get_by_text("Routing", exact=True).click()
        expect(page.get_by_role("heading", name="Canary view")).to_be_visible(timeout=30_000)
        page.get_by_test_id("stSelectbox").first.click()  # the model
        page.get_by_role("option", name="mlp", exact=True).click()
        share = caption(page, "Traffic share by version")
        expect(share).to_contain_text(re.compile(r"v1 0?\.\d+ %|v1 [1-9]"), timeout=30_000)
        expect(share).to_contain_text(re.compile(r"v2 [1-9]"), timeout=45_000)
        expect(page.get_by_text(re.compile(r"route\.set by test: v1 90%, v2 10%"))).to_be_visible()
        page.screenshot(path=str(shots / "routing.png"), full_page=True)

        for name in PAGES:
            if name in ("Overview", "Routing"):
                continue
            sidebar.get_by_text(name, exact=True).click()
            expect(page.get_by_role("heading", name=name, exact=True)).to_be_visible(timeout=30_000)
            page.wait_for_timeout(1500)  # charts draw after the run ends
            assert page.get_by_test_id("stException").count() == 0, f"{name} shows an exception"
            assert page.get_by_text("could not be shown").count() == 0, name
            page.screenshot(path=str(shots / f"{name.lower().replace(' ', '-')}.png"), full_page=True)

        sidebar.get_by_role("button", name="Log out").click()
        expect(page.get_by_label("Password", exact=True)).to_be_visible(timeout=15_000)
        page.reload()  # logged out stays logged out
        expect(page.get_by_label("Password", exact=True)).to_be_visible(timeout=15_000)
        browser.close()
