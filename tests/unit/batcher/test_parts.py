"""Batcher parts without sockets: coalescing keys, cache, breaker, predictor, rates."""

from __future__ import annotations

import pytest

from ferryman.v1 import common_pb2
from ferryman_server.batcher.breaker import Breaker, BreakerState
from ferryman_server.batcher.cache import TTLCache
from ferryman_server.batcher.coalescer import coalescing_key, input_digest
from ferryman_server.batcher.dead_letters import TokenBucket
from ferryman_server.batcher.predictor import LatencyPredictor
from ferryman_server.batcher.rate import RateMeter


def tensor(data: bytes, shape: list[int], name: str = "input") -> common_pb2.NamedTensor:
    return common_pb2.NamedTensor(
        name=name, tensor=common_pb2.Tensor(dtype=common_pb2.DATA_TYPE_FP32, shape=shape, data=data)
    )


def key(tenant: str, shareable: bool = False, params: dict[str, str] | None = None, h: str = "h") -> str:
    return coalescing_key(
        model="m", version="1", parameters=params or {}, input_hash=h, tenant=tenant, shareable=shareable
    )


def test_identical_inputs_share_a_digest_and_differences_do_not() -> None:
    a = input_digest([tensor(b"\x00" * 8, [1, 2])])
    assert a == input_digest([tensor(b"\x00" * 8, [1, 2])])
    assert a != input_digest([tensor(b"\x00" * 8, [2, 1])])
    assert a != input_digest([tensor(b"\x01" + b"\x00" * 7, [1, 2])])
    assert a != input_digest([tensor(b"\x00" * 8, [1, 2], name="other")])
    texts = [common_pb2.NamedTensor(name="t", text=common_pb2.TextList(values=["ab", "c"]))]
    split = [common_pb2.NamedTensor(name="t", text=common_pb2.TextList(values=["a", "bc"]))]
    assert input_digest(texts) != input_digest(split)


def test_two_tenants_never_share_unless_shareable() -> None:
    assert key("acme") == key("acme")
    assert key("acme") != key("globex")
    assert key("acme", shareable=True) == key("globex", shareable=True)
    assert key("acme", params={"t": "1"}) != key("acme", params={"t": "2"})
    assert key("acme", params={"a": "1", "b": "2"}) == key("acme", params={"b": "2", "a": "1"})
    assert key("acme", h="x") != key("acme", h="y")


def test_ttl_cache_expires_and_bounds_size() -> None:
    cache: TTLCache[int] = TTLCache(ttl_s=1.0, max_entries=2)
    cache.put("a", 1, now=0.0)
    cache.put("b", 2, now=0.0)
    assert cache.get("a", now=0.5) == 1
    cache.put("c", 3, now=0.6)  # evicts b, the least recently used
    assert cache.get("b", now=0.6) is None and len(cache) == 2
    assert cache.get("a", now=1.2) is None  # expired


def test_breaker_opens_half_opens_and_closes() -> None:
    breaker = Breaker(threshold=2, cooldown_s=1.0)
    breaker.on_failure(now=0.0)
    assert breaker.allows(0.0)
    breaker.on_failure(now=0.1)
    assert breaker.state == BreakerState.OPEN and not breaker.allows(0.5)
    assert breaker.allows(1.2)
    assert breaker.state is BreakerState.HALF_OPEN  # type: ignore[comparison-overlap]
    breaker.on_call()
    assert not breaker.allows(1.2)  # one probe at a time
    breaker.on_failure(now=1.3)
    assert breaker.state == BreakerState.OPEN
    assert breaker.allows(2.4)
    breaker.on_call()
    breaker.on_success()
    assert breaker.state == BreakerState.CLOSED and breaker.allows(2.5)


def test_predictor_interpolates_extrapolates_and_learns() -> None:
    p = LatencyPredictor(default_s=0.005, smoothing=0.5)
    assert p.predict(10) == 0.005
    p.seed({1: 0.001, 4: 0.004})
    assert p.predict(2) == pytest.approx(0.002)
    assert p.predict(8) == pytest.approx(0.008)
    p.observe(4, 0.006)
    assert p.predict(4) == pytest.approx(0.005)
    p.seed({4: 1.0})  # seeding never overrides what was measured
    assert p.predict(4) == pytest.approx(0.005)


def test_rate_meter_tracks_arrivals_and_decays() -> None:
    meter = RateMeter(tau_s=1.0)
    for i in range(100):
        meter.add(10, now=i * 0.01)
    assert 500 < meter.rate(1.0) < 1000
    assert meter.rate(10.0) < 1


def test_token_bucket_limits_bursts() -> None:
    bucket = TokenBucket(rate=2.0)
    assert [bucket.take(0.0) for _ in range(3)] == [True, True, False]
    assert bucket.take(0.6)
