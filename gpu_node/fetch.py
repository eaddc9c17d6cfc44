"""Artifacts that are not on this node's disk: fetched into a local cache keyed by sha256.

A version's artifact may be a local path (or ``file://``), an object in any S3-compatible
store (``s3://bucket/key``: AWS, MinIO, Ceph; endpoint and credentials from the standard
``AWS_*`` variables), an ``http(s)://`` URL, or an artifact pushed into the registry
(``ferryman://artifacts/<sha256>``, ``ferryman model push``). A remote one is downloaded
once into ``<cache>/<sha256>`` and shared by every version that names the same digest; an
archive (a ``.tar``, ``.tar.gz`` or ``.tgz`` object, or a pushed directory) is unpacked
into a directory. What arrives is checked against the version's sha256 before it is used:
a corrupted or substituted download is deleted and the version FAILS with both digests in
its reason. Past ``max_bytes`` the least recently used entries are evicted, never one a
version this node holds was loaded from.

A fetch cannot wedge the node: an artifact larger than the cache, or than the disk has
free, is refused before it is downloaded (by its declared size) and while it arrives; the
whole fetch has a deadline (a server that trickles bytes fails it as surely as a silent
one); and whatever goes wrong while fetching or unpacking (a full disk, a bad archive, a
transfer error) fails the version with its reason, as a FetchError.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import tarfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO, Protocol
from urllib.parse import urlparse

from ferryman_server.kernel.artifacts import artifact_sha256, pushed_sha256

log = logging.getLogger("ferryman.node")

COPY_BYTES = 1 << 20
"""Bytes copied at a time while downloading (at most: what has arrived is written)."""
FREE_DISK_MARGIN_BYTES = 256 << 20
"""Disk left free beside a download (an archive is unpacked beside it, too)."""
PROGRESS_EVERY_S = 5.0
"""How often a long download says how far it got."""
ARCHIVES = (".tar", ".tar.gz", ".tgz")


class FetchError(Exception):
    """Why an artifact could not be had; the version fails with it."""


class PushedArtifacts(Protocol):
    """The registry's pushed artifacts (``ferryman_server.registry.reader.RegistryReader``)."""

    def pushed_artifact(self, sha256: str) -> object | None: ...
    def artifact_chunks(self, sha256: str) -> Iterator[bytes]: ...


class ArtifactCache:
    """Remote artifacts on this node's disk, by sha256, least recently used evicted."""

    def __init__(
        self,
        root: Path,
        max_bytes: int,
        timeout_s: float,
        pushed: PushedArtifacts | None = None,
        deadline_s: float = 3600.0,
    ) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s
        """How long the connection may stay silent."""
        self.deadline_s = deadline_s
        """How long a whole fetch may take."""
        self.in_use: Callable[[], set[str]] = set
        """The digests of the versions this node holds: never evicted, however long ago they
        were fetched (the node that holds them sets it)."""
        self._pushed = pushed
        self._lock = threading.Lock()
        """One download at a time: the same digest is never fetched twice at once."""

    def local(self, uri: str, sha256: str) -> Path:
        """The artifact's path in the cache, downloading and checking it first if needed."""
        if not sha256:
            raise FetchError(f"artifact {uri[:200]}: a remote artifact needs its sha256 in the registry")
        with self._lock:
            target = self.root / sha256
            if target.exists():
                os.utime(target)  # used now: the last to be evicted
                return target
            self.root.mkdir(parents=True, exist_ok=True)
            part = self.root / f".{sha256}.{uuid.uuid4().hex[:8]}"
            try:
                got = self._fetched(uri, sha256, part)
                actual = artifact_sha256(got)
                if actual != sha256:
                    raise FetchError(
                        f"artifact {uri[:200]}: the download's sha256 is {actual}, the version's is "
                        f"{sha256}: refused (corrupted or replaced)"
                    )
                os.replace(got, target)
            finally:
                for leftover in self.root.glob(f".{sha256}.*"):
                    remove(leftover)
            self._evict(keep=target)
            return target

    def _fetched(self, uri: str, sha256: str, part: Path) -> Path:
        """``_download``, whatever fails in it said as a FetchError (never a stuck load)."""
        try:
            return self._download(uri, sha256, part)
        except FetchError:
            raise
        except (OSError, tarfile.TarError, EOFError, ValueError, LookupError) as exc:
            raise FetchError(f"artifact {uri[:200]}: {type(exc).__name__}: {exc}") from None

    def _room(self) -> int:
        """The most an artifact may take here: the cache's size, and the disk's free bytes."""
        free = shutil.disk_usage(self.root).free - FREE_DISK_MARGIN_BYTES
        return max(0, min(self.max_bytes, free))

    def _download(self, uri: str, sha256: str, part: Path) -> Path:
        """Fetch ``uri`` to ``part`` (unpacked into ``part``.d when an archive)."""
        started = time.monotonic()
        limit = Limit(uri[:200], self._room(), started + self.deadline_s)
        scheme = urlparse(uri).scheme
        archive = uri.endswith(ARCHIVES)
        with part.open("wb") as out:
            if pushed_sha256(uri) is not None:
                archive = self._pushed_to(sha256, out, limit)
            elif scheme == "s3":
                s3_to(uri, out, self.timeout_s, limit)
            elif scheme in ("http", "https"):
                http_to(uri, out, self.timeout_s, limit)
            else:
                raise FetchError(
                    f"artifact {uri[:200]}: no way to fetch {scheme}:// (s3, http, https, ferryman)"
                )
        log.info(
            "fetched %s (%d bytes) in %.1f s", uri[:200], part.stat().st_size, time.monotonic() - started
        )
        if not archive:
            return part
        unpacked = part.with_name(part.name + ".d")
        with tarfile.open(part) as tar:
            unpacked_bytes = sum(member.size for member in tar.getmembers())
            limit.declared(unpacked_bytes + part.stat().st_size)  # both sit on the disk at once
            tar.extractall(unpacked, filter="data")  # no paths outside it, no devices or links out
        return unpacked

    def _pushed_to(self, sha256: str, out: BinaryIO, limit: Limit) -> bool:
        """Copy a pushed artifact's chunks to ``out``; True when it is a directory's tar."""
        if self._pushed is None:
            raise FetchError("this node reads no registry: pushed artifacts cannot reach it")
        record = self._pushed.pushed_artifact(sha256)
        if record is None:
            raise FetchError(f"no artifact {sha256[:12]}… was pushed to the registry")
        size = getattr(record, "size", None)
        if isinstance(size, int):
            limit.declared(size)
        copy_chunks(self._pushed.artifact_chunks(sha256), out, limit)
        return getattr(record, "kind", "file") == "dir"

    def _evict(self, keep: Path) -> None:
        """Remove the least recently used entries until the cache fits ``max_bytes``."""
        entries = [p for p in self.root.iterdir() if not p.name.startswith(".")]
        sizes = {p: size_of(p) for p in entries}
        total = sum(sizes.values())
        held = self.in_use()
        for entry in sorted(entries, key=lambda p: p.stat().st_mtime):
            if total <= self.max_bytes:
                break
            if entry == keep or entry.name in held:
                continue
            log.info("evicting artifact %s (%d bytes) from the cache", entry.name[:12], sizes[entry])
            remove(entry)
            total -= sizes[entry]


class Limit:
    """What one fetch may take: ``room`` bytes, until ``deadline`` (time.monotonic)."""

    def __init__(self, what: str, room: int, deadline: float) -> None:
        self.what = what
        self.room = room
        self.deadline = deadline

    def declared(self, size: int) -> None:
        """The artifact says it is ``size`` bytes: refused now if that cannot fit."""
        if size > self.room:
            raise FetchError(
                f"artifact {self.what}: {size} bytes do not fit the {self.room} this node has for "
                "it (its artifact cache's size, or its free disk)"
            )

    def check(self, copied: int) -> None:
        """``copied`` bytes have arrived: past the room or the deadline, the fetch fails."""
        self.declared(copied)
        if time.monotonic() > self.deadline:
            raise FetchError(f"artifact {self.what}: not fetched by its deadline ({copied} bytes arrived)")


def copy_chunks(chunks: Iterable[bytes], out: BinaryIO, limit: Limit) -> None:
    """Write ``chunks`` to ``out`` within ``limit``, saying how far it got every
    ``PROGRESS_EVERY_S``."""
    copied, last = 0, time.monotonic()
    for chunk in chunks:
        copied += len(chunk)
        limit.check(copied)
        out.write(chunk)
        if time.monotonic() - last > PROGRESS_EVERY_S:
            log.info("fetching %s: %d bytes so far", limit.what, copied)
            last = time.monotonic()


def http_to(uri: str, out: BinaryIO, timeout_s: float, limit: Limit) -> None:
    try:
        with urllib.request.urlopen(uri, timeout=timeout_s) as answer:
            length = answer.headers.get("content-length")
            if length is not None and length.isdigit():
                limit.declared(int(length))
            # read1: whatever has arrived (read(n) waits for n bytes, however slowly they come).
            copy_chunks(iter(functools.partial(answer.read1, COPY_BYTES), b""), out, limit)
    except OSError as exc:
        raise FetchError(f"artifact {uri[:200]}: {exc}") from None


def s3_to(uri: str, out: BinaryIO, timeout_s: float, limit: Limit) -> None:
    """An S3 object, from the store ``AWS_ENDPOINT_URL`` names (AWS when unset), with the
    credentials of the standard chain (``AWS_ACCESS_KEY_ID``..., a role, a profile)."""
    import boto3  # only nodes that fetch from S3 pay its import
    from boto3.exceptions import Boto3Error
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError

    parsed = urlparse(uri)
    bucket, key = parsed.netloc, parsed.path.lstrip("/")
    try:
        client = boto3.client(
            "s3",
            config=Config(connect_timeout=timeout_s, read_timeout=timeout_s, retries={"max_attempts": 3}),
        )
        limit.declared(int(client.head_object(Bucket=bucket, Key=key)["ContentLength"]))
        copied = 0

        def progress(count: int) -> None:
            nonlocal copied
            copied += count
            limit.check(copied)

        client.download_fileobj(bucket, key, out, Callback=progress)
    except (BotoCoreError, ClientError, Boto3Error) as exc:
        raise FetchError(f"artifact {uri[:200]}: {exc}") from None


def size_of(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size


def remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
