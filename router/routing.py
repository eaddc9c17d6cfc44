"""Which version answers a request: pure decisions over a route, a request and readiness.

- An explicit version pin wins.
- Otherwise the route's weights pick: sticky routes hash (salt, tenant or user) into
  100 buckets, so a caller stays on one version while the weights are unchanged;
  non-sticky routes draw at random.
- The route's fallback model answers when the chosen version has no ready replica
  or when the tenant is over a soft quota (the caller decides that and asks again).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass

from ferryman_server.registry.snapshot import RouteRecord

BUCKETS = 100


@dataclass(frozen=True)
class Choice:
    model: str
    version: str
    fallback: bool = False

    @property
    def key(self) -> str:
        """``model:version``, as the registry and the batcher name a version."""
        return f"{self.model}:{self.version}"


def bucket(salt: str, key: str) -> int:
    """Stable bucket 0..99 for a sticky key."""
    digest = hashlib.sha256(f"{salt}\0{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % BUCKETS


def pick_weighted(targets: tuple[tuple[str, int], ...], point: int) -> str:
    """The target whose cumulative weight range holds ``point`` (0..99)."""
    total = 0
    for version, weight in targets:
        total += weight
        if point < total:
            return version
    return targets[-1][0]


def sticky_point(route: RouteRecord, *, tenant: str, user: str) -> int | None:
    """The caller's bucket on a sticky route (the user's, else the tenant's); None when
    the route is not sticky."""
    if route.sticky == "user" and user:
        return bucket(route.salt, f"user:{user}")
    if route.sticky in ("tenant", "user"):
        return bucket(route.salt, f"tenant:{tenant}")
    return None


def choose(
    route: RouteRecord,
    *,
    tenant: str,
    user: str,
    rng: Callable[[], float] = random.random,
) -> str:
    """The version the route's weights give this caller."""
    live = tuple((v, w) for v, w in route.targets if w > 0)
    if not live:
        raise LookupError(f"route of {route.model} has no version with weight")
    point = sticky_point(route, tenant=tenant, user=user)
    return pick_weighted(live, int(rng() * BUCKETS) if point is None else point)


def resolve(
    routes: dict[str, RouteRecord],
    model: str,
    *,
    tenant: str,
    user: str,
    pin: str,
    is_ready: Callable[[str, str], bool],
    may_use: Callable[[str], bool],
    degrade: bool = False,
    rng: Callable[[], float] = random.random,
) -> Choice:
    """The model and version to run, following the fallback when the choice cannot serve.

    A fallback the caller may not use (``may_use``) is never taken: the allow-list holds
    for fallbacks as for the model asked for."""
    route = routes.get(model)
    if pin:
        primary = Choice(model, pin)
    elif route is None:
        raise LookupError(f"model {model!r} has no route")
    else:
        primary = Choice(model, choose(route, tenant=tenant, user=user, rng=rng))
    fallback_model = route.fallback if route is not None else ""
    if (
        fallback_model
        and may_use(fallback_model)
        and (degrade or not is_ready(primary.model, primary.version))
    ):
        fallback_route = routes.get(fallback_model)
        if fallback_route is not None:
            version = choose(fallback_route, tenant=tenant, user=user, rng=rng)
            if is_ready(fallback_model, version) or not is_ready(primary.model, primary.version):
                return Choice(fallback_model, version, fallback=True)
    return primary
