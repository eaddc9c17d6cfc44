"""Route writes: weights, one-step rollback and shadow traffic (part of ``RegistryWriter``)."""

from __future__ import annotations

import secrets
from collections.abc import Mapping

from sqlmodel import Session, select

from ferryman_server.registry import rows
from ferryman_server.registry import validation as v
from ferryman_server.registry.change import Change, WriterBase
from ferryman_server.registry.states import VersionStatus
from ferryman_server.registry.tables import Model, Rollout, Route, utcnow

ROUTE_SALT_BYTES = 8
MAX_SHADOW_PERCENT = 100


def live_rollout(session: Session, model: str, *, lock: bool = False) -> Rollout | None:
    """The model's unfinished rollout, if any; ``lock``: held until the transaction ends
    (PostgreSQL; SQLite runs one writer at a time anyway)."""
    query = select(Rollout).where(Rollout.active_model == model)
    return session.exec(query.with_for_update() if lock else query).first()


def _refuse_during_rollout(session: Session, model: str) -> None:
    rollout = live_rollout(session, model)
    if rollout is not None:
        raise v.RegistryError(
            f"{model!r} is rolling out {rollout.baseline} -> {rollout.candidate} ({rollout.state}): "
            f"its weights move with the rollout; `ferryman rollout abort {model}` first"
        )


def write_targets(c: Change, model_row: Model, weights: Mapping[str, int]) -> Route:
    """Set a route's targets (in ``weights``' order) inside an open change, keeping the
    previous ones for rollback; a new route gets its salt. Versions must exist and not be
    retired; the ones that get weight become ACTIVE."""
    targets = v.check_weights(weights)
    for version, weight in weights.items():
        row = rows.version(c.session, model_row.name, version)
        if weight > 0 and row.status == VersionStatus.RETIRED:
            raise v.RegistryError(f"version {model_row.name}:{version} is retired")
        # Routed versions are live: activate the ones that were only registered.
        if weight > 0 and row.status == VersionStatus.REGISTERED:
            row.status = VersionStatus.ACTIVE.value
            c.session.add(row)
    route = rows.route(c.session, model_row)
    if route is None:
        route = Route(model_id=model_row.id or 0, salt=secrets.token_hex(ROUTE_SALT_BYTES))
    else:
        route.previous_targets = list(route.targets)
    route.targets = targets
    route.updated_at = utcnow()
    c.session.add(route)
    c.detail["targets"] = targets
    return route


class RouteWrites(WriterBase):
    def set_route(
        self,
        model: str,
        weights: Mapping[str, int],
        *,
        sticky: str = "none",
        fallback: str = "",
    ) -> Route:
        """Replace the model's route; versions must exist, weights sum to 100."""
        v.check_weights(weights)
        sticky_key = v.check_sticky(sticky)
        with self._change("route.set", "route", model) as c:
            model_row = rows.model(c.session, model)
            _refuse_during_rollout(c.session, model)
            if fallback:
                if fallback == model:
                    raise v.RegistryError("a model cannot be its own fallback")
                rows.model(c.session, fallback)
            route = write_targets(c, model_row, weights)
            route.sticky = sticky_key.value
            route.fallback_model = fallback
            c.detail.update(sticky=sticky_key.value, fallback=fallback)
        return route

    def rollback_route(self, model: str) -> Route:
        """Restore the route's previous targets (one step back)."""
        with self._change("route.rollback", "route", model) as c:
            model_row = rows.model(c.session, model)
            _refuse_during_rollout(c.session, model)
            route = rows.route(c.session, model_row)
            if route is None or not route.previous_targets:
                raise v.RegistryError(f"route of {model!r} has no previous weights")
            route.targets, route.previous_targets = (
                list(route.previous_targets),
                list(route.targets),
            )
            route.updated_at = utcnow()
            c.session.add(route)
            c.detail["targets"] = route.targets
        return route

    def set_shadow(self, model: str, version: str, percent: int) -> Route:
        """Mirror ``percent`` % of the model's requests to ``version`` (0 or an empty version:
        stop). The shadow answers nobody and is never charged; its outputs are compared."""
        if not 0 <= percent <= MAX_SHADOW_PERCENT:
            raise v.RegistryError(f"shadow percent must be 0..{MAX_SHADOW_PERCENT}, got {percent}")
        if not version:
            percent = 0
        with self._change("route.shadow", "route", model) as c:
            model_row = rows.model(c.session, model)
            route = rows.route(c.session, model_row)
            if route is None:
                raise v.RegistryError(f"model {model!r} has no route to shadow")
            if percent:
                row = rows.version(c.session, model, version)
                if row.status == VersionStatus.RETIRED:
                    raise v.RegistryError(f"version {model}:{version} is retired")
            route.shadow_version, route.shadow_percent = (version, percent) if percent else ("", 0)
            route.updated_at = utcnow()
            c.session.add(route)
            c.detail.update(shadow_version=route.shadow_version, shadow_percent=route.shadow_percent)
        return route
