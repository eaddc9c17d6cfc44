"""What every console page gets: the registry, where metrics live, and who is looking."""

from __future__ import annotations

from dataclasses import dataclass, replace

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy import Engine

from ferryman_server.admin_ui.series.history import ScrapeHistory
from ferryman_server.admin_ui.series.source import LocalSource, PrometheusSource, SeriesSource
from ferryman_server.kernel.config import CommonSettings
from ferryman_server.kernel.security import Security
from ferryman_server.registry.accounts import Permission, Role, allows
from ferryman_server.registry.db import make_engine
from ferryman_server.registry.reader import RegistryReader
from ferryman_server.registry.writer import RegistryWriter


class ConsoleSettings(BaseSettings):
    """Console settings (env prefix ``FERRYMAN_CONSOLE_``)."""

    model_config = SettingsConfigDict(
        env_prefix="FERRYMAN_CONSOLE_", extra="ignore", use_attribute_docstrings=True
    )

    port: int = Field(default=8501, ge=1, le=65535)
    """Port the console's web server listens on (``ferryman admin --port``)."""
    max_connections: int = Field(default=1024, ge=1)
    """Open connections the console's port keeps; past it a new one sheds the connection
    that has waited longest for a request (its sessions' WebSockets are not counted)."""
    max_connections_per_peer: int = Field(default=256, ge=1)
    """Open connections one client address keeps (shed as above)."""
    header_timeout_s: float = Field(default=10.0, gt=0)
    """A connection must send a request's headers within this (else it is closed)."""
    max_header_bytes: int = Field(default=64 * 1024, ge=1024)
    """Most bytes of a request line and headers (more: 431)."""
    metrics_urls: str = ""
    """Comma-separated /metrics URLs of routers and batchers (``ferryman up --json`` prints them)."""
    prometheus_url: str = ""
    """A Prometheus that scrapes the platform: charts then run the dashboards' PromQL on it;
    without one the console scrapes ``metrics_urls`` itself and keeps a bounded history."""
    scrape_interval_s: float = 5.0
    """How often the console's own history scrapes ``metrics_urls``."""
    history_s: float = 24 * 3600.0
    """How far back the console's own history reaches (older scrapes are dropped)."""
    dashboards_dir: str = ""
    """The Grafana dashboards whose panels the charts draw (default: the Helm chart's)."""
    quota_address: str = ""
    """A Quota service (a router's internal port, or a quota server) for live usage bars."""
    jobs_timeout_s: float = 2.0
    """How long a call to the job store (the jobs page) may take."""
    session_ttl_s: float = 12 * 3600.0
    """How long a login lasts, across browser reloads, until it expires or logs out."""
    session_secret: SecretStr = SecretStr("")
    """Signs login cookies; without it each console process signs with a random key of its
    own (a console restart then logs everyone out). Consoles behind one address share one."""
    sso_provider: str = ""
    """Single sign-on through Streamlit's OIDC login (``st.login``): ``default`` for the
    ``[auth]`` section of Streamlit's secrets, or the name of one ``[auth.<name>]`` provider.
    A person signs in as the account named by their e-mail address (``ferryman admin
    add-person``); the identity provider's cookie keeps them signed in across reloads."""
    refresh_s: float = 5.0
    """How often charts and figures redraw in place."""

    def metrics(self) -> list[str]:
        return [u.strip() for u in self.metrics_urls.split(",") if u.strip()]


class NotAllowed(Exception):
    """The person's role does not grant what a page was asked to do."""


@dataclass(frozen=True)
class Person:
    name: str
    role: Role


@dataclass(frozen=True)
class Console:
    """The console's process-wide parts, and the person of the current browser session."""

    reader: RegistryReader
    engine: Engine
    settings: ConsoleSettings
    security: Security
    """How the console reaches internal services (node info, quota usage)."""
    common: CommonSettings
    """The platform's settings (where its durable jobs are kept)."""
    source: SeriesSource | None = None
    """Where charts get their data; None when neither Prometheus nor /metrics URLs are set."""
    person: Person | None = None

    def looking(self, person: Person) -> Console:
        return replace(self, person=person)

    def can(self, permission: Permission) -> bool:
        return self.person is not None and allows(self.person.role, permission)

    def writer(self, permission: Permission) -> RegistryWriter:
        """A writer whose audit events name the person, if their role grants ``permission``."""
        self.require(permission)
        assert self.person is not None
        return RegistryWriter(self.engine, actor=self.person.name)

    def require(self, permission: Permission) -> None:
        if not self.can(permission):
            who = self.person.role.value if self.person else "nobody"
            raise NotAllowed(f"a {who} may not {permission.value}")


def series_source(settings: ConsoleSettings) -> SeriesSource | None:
    if settings.prometheus_url:
        return PrometheusSource(settings.prometheus_url)
    if settings.metrics():
        history = ScrapeHistory(settings.metrics(), settings.scrape_interval_s, settings.history_s)
        return LocalSource(history.start())
    return None


def build_console() -> Console:
    common = CommonSettings()
    engine = make_engine(common.resolved_database_url())
    settings = ConsoleSettings()
    return Console(
        RegistryReader(engine), engine, settings, common.security(), common, series_source(settings)
    )
