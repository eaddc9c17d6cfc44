"""``python -m ferryman_cli`` and the ``ferryman`` console script."""

from __future__ import annotations

import sys

SERVER_EXTRA_HINT = (
    "error: the ferryman command needs the platform: pip install 'ferryman[server]' "
    "(pip install ferryman is the client SDK alone)"
)


def main() -> None:
    try:
        from ferryman_cli.main import run

        run()  # each command's modules are imported as it is called
    except ModuleNotFoundError as exc:
        # An SDK-only install has no typer, sqlmodel, torch...: say what to install.
        if exc.name and exc.name.split(".")[0] not in ("ferryman", "ferryman_cli"):
            sys.exit(f"{SERVER_EXTRA_HINT}; missing {exc.name}")
        raise


if __name__ == "__main__":
    main()
