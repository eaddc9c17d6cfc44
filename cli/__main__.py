"""``python -m ferryman_server.cli`` and the ``ferryman`` console script."""

from __future__ import annotations

import sys

SERVER_EXTRA_HINT = (
    "error: the ferryman command needs the platform: pip install 'ferryman[server]' "
    "(pip install ferryman is the client SDK alone)"
)


def require_server(exc: ModuleNotFoundError) -> None:
    """Exit saying what to install when ``exc`` is a platform dependency an SDK-only install
    lacks (typer, sqlmodel, torch...); return (for the caller to raise) otherwise."""
    if exc.name and exc.name.split(".")[0] not in ("ferryman", "ferryman_server"):
        sys.exit(f"{SERVER_EXTRA_HINT}; missing {exc.name}")


def main() -> None:
    try:
        from ferryman_server.cli.main import run
    except ModuleNotFoundError as exc:
        require_server(exc)
        raise
    run()


if __name__ == "__main__":
    main()
