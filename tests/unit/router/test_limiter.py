"""The router's adaptive concurrency limit (pure: outcomes and a clock are given)."""

from __future__ import annotations

from ferryman_server.router.limiter import AdaptiveLimit, LimitConfig

CONFIG = LimitConfig(initial=1000, minimum=16, backoff=0.9, drop_ratio=0.01, window_s=0.1, window_samples=20)


def run_window(limit: AdaptiveLimit, now: float, offered: int, dropped: float, tenant: str = "t") -> float:
    """``offered`` requests of ``tenant`` arrive together; of those admitted, a ``dropped``
    share is refused further down for load. Their ends are spread over one window."""
    admitted = sum(limit.try_acquire(tenant) for _ in range(offered))
    drops = round(admitted * dropped)
    for i in range(admitted):
        limit.release(tenant, i < drops, now + CONFIG.window_s * (i + 1) / admitted)
    return now + CONFIG.window_s + 0.001


def test_a_healthy_closed_loop_is_never_refused_whatever_its_latency() -> None:
    limit = AdaptiveLimit(CONFIG)
    now = 0.0
    for _ in range(200):  # 64 clients; latency says nothing, refusals below do
        now = run_window(limit, now, 64, 0.0)
        assert limit.inflight == 0
    assert limit.limit == CONFIG.initial


def test_load_refusals_below_cut_the_limit_to_what_ran_and_it_recovers() -> None:
    limit = AdaptiveLimit(CONFIG)
    now = 0.0
    for _ in range(3):  # 3x overload: 300 in flight, a third refused further down
        now = run_window(limit, now, 300, 0.33)
    assert limit.limit <= 300 * 0.9**2
    cut = limit.limit
    # At the limit, a tenant alone is refused at the door: nothing to undo.
    assert sum(limit.try_acquire("t") for _ in range(1000)) == int(cut)
    for _ in range(int(cut)):
        limit.release("t", False, now)
    # No more refusals below and requests close to the limit: it grows by its square root.
    for _ in range(50):
        now = run_window(limit, now, int(limit.limit), 0.0)
    assert limit.limit > cut * 2


def test_the_floor_holds_and_an_idle_router_does_not_raise_its_limit() -> None:
    limit = AdaptiveLimit(CONFIG)
    now = 0.0
    for _ in range(100):
        now = run_window(limit, now, int(limit.limit) + 10, 0.5)
    assert limit.limit == CONFIG.minimum
    for _ in range(100):  # a handful in flight: far below half the limit
        now = run_window(limit, now, 4, 0.0)
    assert limit.limit == CONFIG.minimum


def test_past_the_limit_a_tenant_under_its_share_is_still_admitted() -> None:
    limit = AdaptiveLimit(LimitConfig(**{**CONFIG.__dict__, "initial": 20}))
    assert sum(limit.try_acquire("flood") for _ in range(100)) == 20  # the limit, all its own
    # Another tenant is not locked out by the flood: it may hold up to its share (20 / 2).
    assert sum(limit.try_acquire("light") for _ in range(100)) == 10
    assert not limit.try_acquire("flood")
    # A third tenant gets a share too; the flood stays refused.
    assert limit.try_acquire("third")
    for _ in range(20):
        limit.release("flood", False, 0.0)
    assert "flood" not in limit._by_tenant and limit.try_acquire("flood")
