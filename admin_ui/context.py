"""What every console page gets: the registry's reader and writer, and where metrics live."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic_settings import BaseSettings, SettingsConfigDict

from ferryman.kernel.config import CommonSettings
from ferryman.kernel.security import Security
from registry.db import make_engine
from registry.reader import RegistryReader
from registry.writer import RegistryWriter


class ConsoleSettings(BaseSettings):
    """Console settings (env prefix ``FERRYMAN_CONSOLE_``)."""

    model_config = SettingsConfigDict(env_prefix="FERRYMAN_CONSOLE_", extra="ignore")

    port: int = 8501
    metrics_urls: str = ""
    """Comma-separated /metrics URLs of routers and batchers (``ferryman up --json`` prints them)."""
    quota_address: str = ""
    """A Quota service (a router's internal port, or a quota server) for live usage bars."""
    jobs_timeout_s: float = 2.0
    """How long a call to the job store (the jobs page) may take."""

    def metrics(self) -> list[str]:
        return [u.strip() for u in self.metrics_urls.split(",") if u.strip()]


@dataclass(frozen=True)
class Console:
    reader: RegistryReader
    writer: RegistryWriter
    settings: ConsoleSettings
    security: Security
    """How the console reaches internal services (node info, quota usage)."""
    common: CommonSettings
    """The platform's settings (where its durable jobs are kept)."""


def build_console() -> Console:
    common = CommonSettings()
    engine = make_engine(common.resolved_database_url())
    return Console(
        RegistryReader(engine),
        RegistryWriter(engine, actor="console"),
        ConsoleSettings(),
        common.security(),
        common,
    )
