"""``python -m ferryman``: the same as the ``ferryman`` console script."""

from ferryman.cli.main import app

app()
