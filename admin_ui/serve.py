"""``python -m ferryman_server.admin_ui.serve run app.py ...``: Streamlit's command line, its web server
under a ``ConnectionGuard`` (kernel/connections.py), so idle and half-open
connections cannot hold the console's port: a request's headers within
``FERRYMAN_CONSOLE_HEADER_TIMEOUT_S``, and past the port's bound the longest-waiting
connection is shed, not the operator who just connected."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from streamlit.web import cli
from streamlit.web.server.starlette import starlette_server

from ferryman_server.admin_ui.context import ConsoleSettings
from ferryman_server.kernel.config import CommonSettings
from ferryman_server.kernel.connections import ConnectionGuard, GuardLimits
from ferryman_server.kernel.http_guard import guarded

CONFIG_HOOK = "_get_uvicorn_config_kwargs"
"""Where Streamlit makes its uvicorn settings (streamlit.web.server.starlette_server)."""


def guard(settings: ConsoleSettings) -> None:
    """Make Streamlit's uvicorn speak HTTP under a guard with ``settings``' bounds."""
    made: Callable[[], dict[str, Any]] | None = getattr(starlette_server, CONFIG_HOOK, None)
    if made is None:
        raise RuntimeError(f"this Streamlit makes its server settings elsewhere (no {CONFIG_HOOK})")
    limits = GuardLimits(
        max_connections=settings.max_connections,
        max_per_peer=settings.max_connections_per_peer,
        header_timeout_s=settings.header_timeout_s,
        # Uploads on the console are small forms; a body gets as long as the headers did.
        body_timeout_s=settings.header_timeout_s,
        max_header_bytes=settings.max_header_bytes,
    )

    def guarded_kwargs() -> dict[str, Any]:
        return {**made(), "http": guarded(ConnectionGuard(limits), CommonSettings().proxies())}

    setattr(starlette_server, CONFIG_HOOK, guarded_kwargs)


if __name__ == "__main__":
    guard(ConsoleSettings())
    sys.argv[0] = "streamlit"
    sys.exit(cli.main())
