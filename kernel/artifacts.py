"""Model artifacts: where they lie and what their checksum is.

An artifact is a file (``.pt2``, TorchScript) or a directory (a python handler's
weights and tokenizer). A directory's sha256 is taken over a manifest of its files'
relative paths and digests, so it is as tamper-evident as a single file.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from urllib.parse import unquote, urlparse

CHUNK_BYTES = 1 << 20


PUSHED_PREFIX = "ferryman://artifacts/"
"""Artifacts ``ferryman model push`` stored in the registry: the prefix, then the sha256."""
SHA256_HEX = 64


def pushed_uri(sha256: str) -> str:
    return PUSHED_PREFIX + sha256


def pushed_sha256(uri: str) -> str | None:
    """The sha256 a ``ferryman://artifacts/`` URI names, None for any other URI."""
    if not uri.startswith(PUSHED_PREFIX):
        return None
    digest = uri.removeprefix(PUSHED_PREFIX)
    return digest if len(digest) == SHA256_HEX and all(c in "0123456789abcdef" for c in digest) else ""


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


def artifact_sha256(path: Path) -> str:
    """sha256 of a file, or of a directory's manifest of (relative path, file digest)."""
    if path.is_file():
        return file_sha256(path)
    manifest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        manifest.update(f"{file.relative_to(path).as_posix()}\0{file_sha256(file)}\n".encode())
    return manifest.hexdigest()
