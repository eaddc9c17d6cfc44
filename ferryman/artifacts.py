"""Model artifacts: where they lie and what their checksum is."""

from __future__ import annotations

import hashlib
from pathlib import Path
from urllib.parse import unquote, urlparse

CHUNK_BYTES = 1 << 20


def artifact_path(uri: str) -> Path | None:
    """The local path of a ``file://`` URI or plain path; None for remote schemes."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    if parsed.scheme == "":
        return Path(uri).expanduser().resolve()
    return None


def file_sha256(path: Path) -> str:
    """sha256 hex digest of a file, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()
