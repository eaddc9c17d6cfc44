"""The console in a real headless Chromium over a seeded registry: a rollout shown live."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from console_app import CHROMIUM_ARGS, start_console
from services import unavailable

from ferryman_server.kernel.canary import Gates
from ferryman_server.kernel.net import free_port
from ferryman_server.registry.db import make_engine
from ferryman_server.registry.migrate import upgrade
from ferryman_server.registry.specs import QuotaLimits
from ferryman_server.registry.tables import DeadLetter
from ferryman_server.registry.writer import RegistryWriter, VersionSpec

# Left out of make test-fast: a browser.
pytestmark = pytest.mark.slow

PASSWORD = "browser-test-password"
START_TIMEOUT_S = 60.0
SETTLE_TIMEOUT_S = 15.0
SCHEMA = {
    "inputs": [{"name": "input", "dtype": "FP32", "shape": [512]}],
    "outputs": [{"name": "output", "dtype": "FP32", "shape": [10]}],
}


def seed(url: str, root: Path) -> None:
    engine = make_engine(url)
    upgrade(engine)
    writer = RegistryWriter(engine, actor="test")
    artifact = root / "mlp.pt2"
    artifact.write_bytes(b"weights")
    for version in ("1", "2"):
        writer.register_version(
            VersionSpec(
                model="mlp",
                version=version,
                artifact=str(artifact),
                format="torch_export",
                io_schema=SCHEMA,
                description="demo MLP",
            )
        )
    writer.set_route("mlp", {"1": 100}, sticky="user")
    for tenant in ("acme", "globex"):
        writer.create_tenant(tenant)
    writer.set_quota("acme", QuotaLimits(rpm=600, tpm=100000, cost_per_day_usd=5.0, burst=50))
    writer.register_node("node-1", "127.0.0.1:1", device="cpu", capacity=2)
    writer.set_node_lifecycle("node-1", "READY")
    writer.heartbeat("node-1", ["mlp:1", "mlp:2"])
    # A rollout at its second step, as the controller leaves it after a passing first one.
    writer.start_rollout("mlp", "2", steps=[5, 25, 50, 100], dwell_s=120, gates=Gates(min_requests=50))
    writer.weigh_rollout("mlp", ["node-1"], step=0)
    verdict: dict[str, Any] = {
        "outcome": "inconclusive",
        "reasons": ["too few requests (31 canary, 94 baseline; 50 each)"],
        "numbers": {
            "baseline_requests": 94.0,
            "canary_requests": 31.0,
            "baseline_p99_ms": 18.2,
            "canary_p99_ms": 17.9,
        },
    }
    writer.advance_rollout("mlp", {**verdict, "outcome": "pass"}, step=0)
    writer.record_rollout_check("mlp", {"action": "wait", "reason": verdict["reasons"][0], **verdict})
    writer.record_dead_letter(
        DeadLetter(
            model="mlp",
            version="2",
            request_id="r-42",
            tenant="acme",
            input_sha256="ab" * 32,
            error="ValueError: poison value in batch",
        )
    )
    engine.dispose()


@pytest.fixture
def console_url(tmp_path: Path) -> Iterator[str]:
    if shutil.which("chromium") is None:
        unavailable("chromium is not installed (apt-get install chromium)")
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    seed(url, tmp_path)
    port = free_port()
    env = {
        **os.environ,
        "FERRYMAN_DATABASE_URL": url,
        "FERRYMAN_ADMIN_PASSWORD": PASSWORD,
        "FERRYMAN_DATA_DIR": str(tmp_path),
    }
    proc = start_console(port, env)
    base = f"http://127.0.0.1:{port}"
    yield base
    proc.terminate()
    proc.wait(10)


def settle(page: Any) -> None:
    """Wait until Streamlit has finished the run: no status widget, no skeleton placeholders."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while time.monotonic() < deadline:
        busy = page.get_by_test_id("stStatusWidget").count() + page.get_by_test_id("stSkeleton").count()
        if busy == 0:
            break
        page.wait_for_timeout(100)
    page.wait_for_timeout(800)  # tables and charts draw after the run ends


def test_a_running_rollout_in_a_real_browser(console_url: str, tmp_path: Path) -> None:
    """The routing page during a rollout at its second step (seeded as the controller leaves
    it): shown live, screenshotted for docs/rollouts.md. Every page under live traffic is
    test_console_live's."""
    from playwright.sync_api import expect, sync_playwright

    shots = Path(os.environ.get("FERRYMAN_SCREENSHOT_DIR") or tmp_path / "screenshots")
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1200})
        page.goto(console_url)
        page.get_by_label("Name").fill("admin")
        page.get_by_label("Password", exact=True).fill(PASSWORD)
        page.get_by_role("button", name="Log in").click()
        sidebar = page.get_by_test_id("stSidebar")
        sidebar.get_by_text("Routing", exact=True).click()
        expect(page.get_by_role("heading", name="Routing", exact=True)).to_be_visible(timeout=30_000)
        expect(page.get_by_text("RUNNING", exact=True)).to_be_visible(timeout=10_000)
        expect(page.get_by_text("25%", exact=True)).to_be_visible()
        settle(page)
        assert page.get_by_test_id("stException").count() == 0
        page.screenshot(path=str(shots / "rollout.png"), full_page=True)
        browser.close()
