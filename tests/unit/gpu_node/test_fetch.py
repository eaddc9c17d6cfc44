"""The node's artifact cache, with a fake registry store (no sockets): a pushed file and a
pushed directory arrive whole and checked, a second version with the same digest costs no
download, a corrupted one is refused and leaves nothing behind, and past the size bound
the least recently used entries go."""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ferryman_server.gpu_node.fetch import ArtifactCache, FetchError
from ferryman_server.kernel.artifacts import artifact_sha256, pushed_uri


@dataclass
class Record:
    kind: str


class FakePushed:
    """Pushed artifacts as the registry holds them: a file's bytes, or a directory's tar."""

    def __init__(self) -> None:
        self.blobs: dict[str, tuple[str, bytes]] = {}
        self.reads = 0

    def push(self, path: Path, tamper: bool = False) -> str:
        digest = artifact_sha256(path)
        if path.is_dir():
            packed = io.BytesIO()
            with tarfile.open(fileobj=packed, mode="w") as tar:
                tar.add(path, arcname=".")
            kind, data = "dir", packed.getvalue()
        else:
            kind, data = "file", path.read_bytes()
        if tamper:
            data = data[:-1] + bytes([data[-1] ^ 1])
        self.blobs[digest] = (kind, data)
        return digest

    def pushed_artifact(self, sha256: str) -> Record | None:
        found = self.blobs.get(sha256)
        return Record(found[0]) if found else None

    def artifact_chunks(self, sha256: str) -> Iterator[bytes]:
        self.reads += 1
        data = self.blobs[sha256][1]
        for start in range(0, len(data), 1000):
            yield data[start : start + 1000]


def file_of(path: Path, size: int, fill: bytes = b"w") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(fill * size)
    return path


def test_a_pushed_file_and_directory_arrive_checked_and_once(tmp_path: Path) -> None:
    pushed = FakePushed()
    weights = file_of(tmp_path / "src" / "w.bin", 5000)
    model_dir = tmp_path / "src" / "minilm"
    file_of(model_dir / "config.json", 10, b"c")
    file_of(model_dir / "tokenizer" / "vocab.txt", 3000, b"v")
    cache = ArtifactCache(tmp_path / "cache", max_bytes=10**9, timeout_s=5, pushed=pushed)
    for source in (weights, model_dir):
        digest = pushed.push(source)
        got = cache.local(pushed_uri(digest), digest)
        assert got == tmp_path / "cache" / digest and artifact_sha256(got) == digest
    assert (tmp_path / "cache" / artifact_sha256(model_dir) / "tokenizer" / "vocab.txt").exists()
    reads = pushed.reads
    cache.local(pushed_uri(artifact_sha256(weights)), artifact_sha256(weights))  # another version, same file
    assert pushed.reads == reads, "a cached digest is not fetched again"
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.startswith(".")], "no partial files"


def test_a_corrupted_download_is_refused_and_nothing_is_kept(tmp_path: Path) -> None:
    pushed = FakePushed()
    digest = pushed.push(file_of(tmp_path / "w.bin", 4000), tamper=True)
    cache = ArtifactCache(tmp_path / "cache", max_bytes=10**9, timeout_s=5, pushed=pushed)
    with pytest.raises(FetchError, match=f"the version's is {digest}: refused"):
        cache.local(pushed_uri(digest), digest)
    assert list((tmp_path / "cache").iterdir()) == []


def test_past_its_bound_the_least_recently_used_go(tmp_path: Path) -> None:
    pushed = FakePushed()
    digests = [pushed.push(file_of(tmp_path / f"{i}.bin", 4000, bytes([65 + i]))) for i in range(3)]
    cache = ArtifactCache(tmp_path / "cache", max_bytes=9000, timeout_s=5, pushed=pushed)
    for i, digest in enumerate(digests[:2]):
        cache.local(pushed_uri(digest), digest)
        os.utime(tmp_path / "cache" / digest, (1000 + i, 1000 + i))
    cache.local(pushed_uri(digests[0]), digests[0])  # used again: now the most recent
    cache.local(pushed_uri(digests[2]), digests[2])
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == sorted([digests[0], digests[2]])


def test_what_cannot_be_fetched_says_why(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path / "cache", max_bytes=10**9, timeout_s=5)
    with pytest.raises(FetchError, match="needs its sha256"):
        cache.local("s3://models/m.pt2", "")
    with pytest.raises(FetchError, match="no way to fetch ftp://"):
        cache.local("ftp://host/m.pt2", "a" * 64)
    with pytest.raises(FetchError, match="reads no registry"):
        cache.local(pushed_uri("b" * 64), "b" * 64)


class LosingPushed(FakePushed):
    """A registry that lost one of an artifact's chunks (the reader raises LookupError)."""

    def artifact_chunks(self, sha256: str) -> Iterator[bytes]:
        chunks = super().artifact_chunks(sha256)
        yield next(chunks)
        raise LookupError(f"artifact {sha256[:12]}… lost its chunk 1")


def test_a_lost_chunk_or_a_bad_archive_fails_the_fetch_with_its_reason(tmp_path: Path) -> None:
    """Whatever goes wrong while fetching or unpacking is a FetchError (the version FAILS
    with it), never another exception that would leave its load stuck."""
    pushed = LosingPushed()
    digest = pushed.push(file_of(tmp_path / "w.bin", 4000))
    cache = ArtifactCache(tmp_path / "cache", max_bytes=10**9, timeout_s=5, pushed=pushed)
    with pytest.raises(FetchError, match="lost its chunk 1"):
        cache.local(pushed_uri(digest), digest)
    broken = FakePushed()
    digest = broken.push(file_of(tmp_path / "d" / "config.json", 10))
    broken.blobs[digest] = ("dir", b"not a tar archive" * 100)
    cache = ArtifactCache(tmp_path / "cache2", max_bytes=10**9, timeout_s=5, pushed=broken)
    with pytest.raises(FetchError, match="ReadError"):
        cache.local(pushed_uri(digest), digest)
    assert list((tmp_path / "cache2").iterdir()) == []


def test_an_artifact_a_held_version_was_loaded_from_is_never_evicted(tmp_path: Path) -> None:
    """Least recently fetched is not least recently used: a version serving for days was
    fetched once. What the node holds stays, whatever its age."""
    pushed = FakePushed()
    digests = [pushed.push(file_of(tmp_path / f"{i}.bin", 4000, bytes([65 + i]))) for i in range(3)]
    cache = ArtifactCache(tmp_path / "cache", max_bytes=9000, timeout_s=5, pushed=pushed)
    cache.in_use = lambda: {digests[0]}
    for i, digest in enumerate(digests[:2]):
        cache.local(pushed_uri(digest), digest)
        os.utime(tmp_path / "cache" / digest, (1000 + i, 1000 + i))  # the held one is the oldest
    cache.local(pushed_uri(digests[2]), digests[2])
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == sorted([digests[0], digests[2]])
