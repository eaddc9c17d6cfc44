"""The console as an operator keeps it open, in headless Chromium against ``ferryman up``
under steady traffic: log in, reload and stay logged in, see the Overview's charts fill
within 30 s without reloading, switch the time range, and watch a 90/10 canary. Every page
is screenshotted (``FERRYMAN_SCREENSHOT_DIR=docs/screenshots`` regenerates the docs')."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import streamlit as st
from console_app import CHROMIUM_ARGS, EVERYONE_SEES, logged_in
from prometheus_server import SCRAPE_INTERVAL_S, run_prometheus
from services import unavailable

import ferryman
from ferryman_server.admin_ui.series.charts import UNITS, Window, frame, panel
from ferryman_server.admin_ui.series.history import ScrapeHistory
from ferryman_server.admin_ui.series.source import LocalSource, PrometheusSource
from ferryman_server.cli.bench.neighbors import ferryman_up
from ferryman_server.kernel.net import free_port
from ferryman_server.registry.db import make_engine
from ferryman_server.registry.reader import RegistryReader
from ferryman_server.registry.specs import QuotaLimits
from ferryman_server.registry.writer import RegistryWriter, VersionSpec

# Left out of make test-fast: ferryman up, Prometheus and a browser.
pytestmark = pytest.mark.slow

PAGES = [*EVERYONE_SEES, "People"]
DATA_WITHIN_MS = 30_000
"""The issue's bar: charts show data this soon after login, with no reload."""
TRAFFIC_INTERVAL_S = 0.08
USERS = 200
"""Distinct sticky users: enough that a 10 % canary surely gets some (0.9^200 misses)."""
READY_TIMEOUT_S = 60.0


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


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, Any], RegistryWriter]]:
    """One ``ferryman up`` for the module: mlp v1 and a placed v2, steady traffic."""
    tmp_path = tmp_path_factory.mktemp("up")
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
            yield {**info, "data_dir": str(tmp_path)}, writer
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

    if shutil.which("chromium") is None:
        unavailable("chromium is not installed (apt-get install chromium)")
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
        # The page's script writes the login cookie as the first run after login draws.
        page.wait_for_function("() => document.cookie.includes('ferryman_console=')", timeout=10_000)
        page.reload()  # the login survives it (a signed cookie naming a registry session)
        expect(sidebar.get_by_text("admin (admin)")).to_be_visible(timeout=30_000)
        assert page.get_by_label("Password", exact=True).count() == 0

        # Charts fill in place: no reload, no click.
        requests = caption(page, "Requests per second by model")
        expect(requests).to_contain_text(re.compile(r"mlp [1-9]"), timeout=DATA_WITHIN_MS)
        expect(caption(page, "Latency p50 / p99")).to_contain_text(re.compile(r"p99 mlp \d"))
        expect(page.get_by_text("Nothing wrong right now.")).to_be_visible()

        page.get_by_text("1 h", exact=True).click()
        expect(page.get_by_text(re.compile(r"^The last 1 h from"))).to_be_visible(timeout=15_000)
        expect(requests).to_contain_text(re.compile(r"mlp [1-9]"), timeout=15_000)

        reader = RegistryReader(make_engine(f"sqlite:///{info['data_dir']}/registry.db"))
        deadline = time.monotonic() + READY_TIMEOUT_S
        while "mlp:2" not in reader.ready_versions(heartbeat_timeout_s=READY_TIMEOUT_S):
            assert time.monotonic() < deadline, "mlp v2 never became ready on the node"
            time.sleep(0.5)
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

        # The Nodes page says what is loaded where and what each version holds.
        sidebar.get_by_text("Nodes", exact=True).click()
        expect(page.get_by_text("What is loaded where")).to_be_visible(timeout=30_000)
        placed = page.locator("table").filter(has_text="minilm:1")
        # ferryman up places its demo versions: pinned, never evicted for a load on demand.
        expect(placed).to_contain_text(
            re.compile(r"minilm:1\s*serving\s*[1-9][\d,]* MiB\s*pinned"), timeout=30_000
        )

        # An admin adds an operator in the browser; the operator logs in elsewhere.
        sidebar.get_by_text("People", exact=True).click()
        page.get_by_label("Name").fill("olivia")
        page.get_by_test_id("stSelectbox").first.click()  # the role
        page.get_by_role("option", name="operator", exact=True).click()
        page.get_by_label("Password", exact=True).fill("operator password")
        page.get_by_role("button", name="Save").click()
        expect(page.get_by_text("olivia saved as operator")).to_be_visible(timeout=15_000)
        other = browser.new_page(viewport={"width": 1400, "height": 900})
        other.goto(info["console_url"])
        other.get_by_label("Name").fill("olivia")
        other.get_by_label("Password", exact=True).fill("operator password")
        other.get_by_role("button", name="Log in").click()
        others = other.get_by_test_id("stSidebar")
        expect(others.get_by_text("olivia (operator)")).to_be_visible(timeout=30_000)
        assert others.get_by_text("People", exact=True).count() == 0
        other.close()

        sidebar.get_by_text("Overview", exact=True).click()  # a minute and more of traffic now
        expect(requests).to_contain_text(re.compile(r"mlp [1-9]"), timeout=15_000)
        page.wait_for_timeout(1500)
        page.screenshot(path=str(shots / "overview.png"), full_page=True)

        sidebar.get_by_role("button", name="Log out").click()
        expect(page.get_by_label("Password", exact=True)).to_be_visible(timeout=15_000)
        page.reload()  # logged out stays logged out
        expect(page.get_by_label("Password", exact=True)).to_be_visible(timeout=15_000)
        browser.close()


AGREEMENT = [
    ("overview", "Requests per second by model"),
    ("overview", "Latency p50 / p99"),
    ("overview", "Batch fill ratio (mean) by model"),
    ("batching", "Queue wait p50 / p99"),
    ("tenants", "Requests per second by tenant"),
    ("canary", "Traffic share by version"),
]
"""Panels compared: counters, histograms, a ratio, and a share between versions."""
AGREEMENT_RANGE_S = 60.0
LOCAL_TOLERANCE = 0.2
"""The console's own scrapes against Prometheus': two scrapers at their own instants see
somewhat different windows; means over a minute agree this closely."""
RULES = Path(__file__).resolve().parents[3] / "helm" / "ferryman" / "alerts" / "ferryman-rules.yaml"


def grafana_query(url: str, expr: str, window: Window) -> dict[str, list[tuple[float, float]]]:
    """The dashboard's text as Grafana sends it (every variable 'All'), straight to Prometheus."""
    text = expr.replace("$__rate_interval", f"{round(window.rate_window_s * 1000)}ms")
    text = text.replace('"$model"', '".*"').replace('"$tenant"', '".*"')
    params = {"query": text, "start": window.start, "end": window.end, "step": window.step}
    with urllib.request.urlopen(
        f"{url}/api/v1/query_range?{urllib.parse.urlencode(params)}", timeout=10
    ) as r:
        body = json.loads(r.read())
    return {
        json.dumps(s["metric"], sort_keys=True): [(float(t), float(v)) for t, v in s["values"]]
        for s in body["data"]["result"]
    }


def means(data: Any) -> dict[str, float]:
    return {str(k): float(v) for k, v in data.groupby("series")["value"].mean().items()}


def test_with_prometheus_the_charts_show_the_dashboards_numbers(
    platform: tuple[dict[str, Any], RegistryWriter], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    info, _ = platform
    urls = list(info["metrics"].values())
    targets = [u.removeprefix("http://").removesuffix("/metrics") for u in urls]
    test_rules = tmp_path / "test-rules.yaml"
    test_rules.write_text(
        "groups:\n  - name: console-test\n    rules:\n"
        "      - alert: FerrymanConsoleTest\n        expr: vector(1)\n"
        "        annotations: {summary: raised by the test}\n"
    )
    history = ScrapeHistory(urls, SCRAPE_INTERVAL_S, reach_s=3600.0).start()
    try:
        with run_prometheus(tmp_path / "prometheus", targets, [RULES, test_rules]) as url:
            prometheus, local = PrometheusSource(url), LocalSource(history)
            time.sleep(AGREEMENT_RANGE_S / 2)  # both have scraped some of the traffic
            window = Window(
                end=time.time() - 2 * SCRAPE_INTERVAL_S,
                range_s=AGREEMENT_RANGE_S / 2,
                scrape_s=SCRAPE_INTERVAL_S,
            )
            for board, title in AGREEMENT:
                chosen = panel(board, title)
                shown = frame(prometheus, chosen, window, {})
                assert not shown.empty, title
                _, factor = UNITS[chosen.unit]
                direct = [
                    v * factor
                    for expr, _ in chosen.targets
                    for points in grafana_query(url, expr, window).values()
                    for _, v in points
                    if not math.isnan(v)
                ]
                # Exactly the dashboard's numbers: the same queries over the same past instants.
                assert sorted(shown["value"].tolist()) == pytest.approx(sorted(direct)), title
                ours, theirs = means(frame(local, chosen, window, {})), means(shown)
                assert set(ours) == set(theirs), title
                for name, value in theirs.items():
                    assert ours[name] == pytest.approx(value, rel=LOCAL_TOLERANCE), f"{title}: {name}"
            # The Overview, on Prometheus: the rule's alert among what is wrong, the charts' source named.
            monkeypatch.setenv("FERRYMAN_DATABASE_URL", f"sqlite:///{info['data_dir']}/registry.db")
            monkeypatch.setenv("FERRYMAN_ADMIN_PASSWORD", info["console_password"])
            monkeypatch.setenv("FERRYMAN_CONSOLE_PROMETHEUS_URL", url)
            st.cache_resource.clear()
            try:
                at = logged_in("admin", info["console_password"])
            finally:
                st.cache_resource.clear()
            assert "alert FerrymanConsoleTest is firing" in at.error[0].value
            assert any("from Prometheus" in c.value for c in at.caption)
    finally:
        history.stop()
