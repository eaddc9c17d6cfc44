"""'Is anything wrong right now?': what the Overview answers first. Pure once its inputs
are gathered."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from ferryman_server.admin_ui.context import Console
from ferryman_server.admin_ui.series.charts import Window, expression, panel
from ferryman_server.admin_ui.series.source import PrometheusSource
from ferryman_server.registry.snapshot import heartbeat_age_s

RECENT_S = 300.0
"""How far back 'now' reaches for refusals (the window a rate is taken over)."""
DEAD_LETTER_HOUR = timedelta(hours=1)
RECENT_GONE_S = 3600.0
"""A node gone for less than this is reported (it may have died); one gone longer is not."""


@dataclass(frozen=True)
class Problem:
    what: str
    detail: str


@dataclass(frozen=True)
class Findings:
    alerts: list[tuple[str, str]]
    """(alert name, its summary), firing now."""
    nodes_not_ready: list[tuple[str, str]]
    """(node, why)."""
    breakers_open: list[str]
    refused: dict[str, float]
    """tenant -> refusals per second over the last minutes."""
    dead_letters_last_hour: int


def problems(found: Findings) -> list[Problem]:
    out = [Problem(f"alert {name} is firing", summary) for name, summary in found.alerts]
    out += [Problem(f"node {name} is not ready", why) for name, why in found.nodes_not_ready]
    out += [
        Problem(f"breaker open for node {node}", "its batches go elsewhere") for node in found.breakers_open
    ]
    out += [
        Problem(
            f"tenant {tenant} is being refused",
            f"{rate:.2f} refusals/s over the last {RECENT_S / 60:.0f} min",
        )
        for tenant, rate in sorted(found.refused.items(), key=lambda kv: -kv[1])
        if rate > 0
    ]
    if found.dead_letters_last_hour:
        out.append(
            Problem(f"{found.dead_letters_last_hour} dead letters in the last hour", "see Dead letters")
        )
    return out


def gather(ctx: Console) -> Findings:
    now = datetime.now(UTC)
    not_ready = []
    for node in ctx.reader.nodes():
        age = heartbeat_age_s(node, now)
        if node.lifecycle == "READY" and age > ctx.common.heartbeat_timeout_s:
            not_ready.append((node.name, f"no heartbeat for {age:.0f} s"))
        elif node.lifecycle == "STARTING":
            not_ready.append((node.name, f"starting (loading its versions), last heard {age:.0f} s ago"))
        elif node.lifecycle == "GONE" and age < RECENT_GONE_S:
            # One that left long ago is history (the Nodes page lists it), not a problem now.
            not_ready.append((node.name, f"gone, last heard {age / 60:.0f} min ago"))
    letters = ctx.reader.dead_letter_count(now - DEAD_LETTER_HOUR)
    alerts: list[tuple[str, str]] = []
    breakers: list[str] = []
    refused: dict[str, float] = {}
    if ctx.source is not None:
        if isinstance(ctx.source, PrometheusSource):
            for alert in ctx.source.firing_alerts():
                labels, notes = dict(alert.get("labels", {})), dict(alert.get("annotations", {}))  # type: ignore[call-overload]
                alerts.append((str(labels.get("alertname", "?")), str(notes.get("summary", ""))))
        at = now.timestamp()
        for labels, value in ctx.source.query("max by (node) (ferryman_breaker_open)", at).items():
            if value > 0:
                breakers.append(dict(labels).get("node", "?"))
        window = Window(end=at, range_s=RECENT_S, scrape_s=RECENT_S / 4)
        (expr, _), *_ = panel("tenants", "Refusals by tenant").targets
        for labels, value in ctx.source.query(
            f"sum by (tenant) ({expression(expr, {}, window)})", at
        ).items():
            tenant = dict(labels).get("tenant", "?")
            refused[tenant] = refused.get(tenant, 0.0) + value
    return Findings(alerts, not_ready, breakers, refused, letters)
