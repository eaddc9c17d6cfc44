"""Settings shared by every Ferryman process (env prefix ``FERRYMAN_``).

Each service adds its own settings model with its own prefix
(``FERRYMAN_NODE_``, ``FERRYMAN_ROUTER_``, ...); what all of them need, where the
registry lives and where local data goes, is here.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


def default_data_dir() -> Path:
    """Where the embedded setup keeps its SQLite registry and model artifacts."""
    return Path.home() / ".ferryman"


class CommonSettings(BaseSettings):
    """Settings every service reads."""

    model_config = SettingsConfigDict(env_prefix="FERRYMAN_", extra="ignore")

    data_dir: Path = Field(default_factory=default_data_dir)
    """Local state: the SQLite registry, built demo model artifacts."""

    database_url: str = ""
    """SQLAlchemy URL of the registry; empty means SQLite at ``data_dir/registry.db``."""

    log_level: str = "INFO"

    def resolved_database_url(self) -> str:
        """The registry URL, defaulting to the embedded SQLite file."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.data_dir / 'registry.db'}"
