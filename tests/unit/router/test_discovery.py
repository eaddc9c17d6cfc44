"""Batchers behind the configured addresses: names expand to what they resolve to, a DNS
failure moves nothing, and a new batcher takes only the models it now owns."""

from __future__ import annotations

import pytest

from ferryman_server.kernel.security import Security
from ferryman_server.router.batchers import BatcherPool, rendezvous
from ferryman_server.router.discovery import Member, flatten, resolve, split

TIMEOUT_S = 1.0
MODELS = [f"model-{i}" for i in range(300)]


class FakeDns:
    def __init__(self, answers: dict[str, list[str]]) -> None:
        self.answers = answers
        self.asked: list[tuple[str, int]] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.asked.append((host, port))
        if host not in self.answers:
            raise OSError(f"no such host {host}")
        return self.answers[host]


async def test_a_name_stands_for_every_address_it_resolves_to() -> None:
    dns = FakeDns({"fm-batcher-headless": ["10.0.0.9", "10.0.0.7", "10.0.0.9", "fd00::1"]})
    members = await resolve(["fm-batcher-headless:7003", "10.1.1.1:7003"], dns, {}, TIMEOUT_S)
    assert members == {
        "fm-batcher-headless:7003": [
            Member("10.0.0.7:7003", "fm-batcher-headless"),
            Member("10.0.0.9:7003", "fm-batcher-headless"),
            Member("[fd00::1]:7003", "fm-batcher-headless"),
        ],
        "10.1.1.1:7003": [Member("10.1.1.1:7003")],
    }
    assert dns.asked == [("fm-batcher-headless", 7003)], "an IP literal is not looked up"


async def test_a_failed_or_empty_answer_keeps_the_last_one() -> None:
    previous = {"svc:7003": [Member("10.0.0.7:7003", "svc")]}
    assert await resolve(["svc:7003"], FakeDns({}), previous, TIMEOUT_S) == previous
    assert await resolve(["svc:7003"], FakeDns({"svc": []}), previous, TIMEOUT_S) == previous
    never = await resolve(["svc:7003"], FakeDns({}), {}, TIMEOUT_S)
    assert never == {"svc:7003": [Member("svc:7003")]}, "never resolved: dial the name itself"


def test_addresses_must_name_a_port() -> None:
    assert split("[fd00::1]:7003") == ("fd00::1", 7003)
    with pytest.raises(ValueError, match="host:port"):
        split("batcher")
    with pytest.raises(ValueError, match="'batcher' is not host:port"):
        BatcherPool(["10.0.0.1:7003", "batcher"], 1, 1 << 20, Security())


def test_a_new_batcher_takes_only_the_models_it_now_owns() -> None:
    before = ["10.0.0.1:7003", "10.0.0.2:7003"]
    after = [*before, "10.0.0.3:7003"]
    moved = [m for m in MODELS if rendezvous(before, m)[0] != rendezvous(after, m)[0]]
    assert all(rendezvous(after, m)[0] == "10.0.0.3:7003" for m in moved)
    assert 0.2 < len(moved) / len(MODELS) < 0.45, "about a third move, to the newcomer"


async def test_the_pool_follows_the_name() -> None:
    dns = FakeDns({"svc": ["10.0.0.1"]})
    pool = BatcherPool(["svc:7003"], 1, 1 << 20, Security(), resolver=dns)
    assert pool.members == ["svc:7003"], "before the first answer"
    await pool.refresh(TIMEOUT_S)
    assert pool.members == ["10.0.0.1:7003"]
    dns.answers["svc"] = ["10.0.0.2", "10.0.0.1"]
    await pool.refresh(TIMEOUT_S)
    assert pool.members == ["10.0.0.1:7003", "10.0.0.2:7003"]
    assert [m.address for m in flatten({"a": [Member("b:1")], "c": [Member("b:1")]})] == ["b:1"]
    await pool.close()
