"""Read access to the registry. Reads never write; the writer is the only writer."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, func
from sqlmodel import Session, col, select

from ferryman_server.kernel.canary import Moments
from ferryman_server.registry.accounts import token_digest
from ferryman_server.registry.snapshot import NodeVersions, node_versions, ready_versions
from ferryman_server.registry.tables import (
    AdminCredential,
    ApiKey,
    ArtifactChunk,
    AuditEvent,
    ConfigRevision,
    ConsoleAccount,
    ConsoleSession,
    DeadLetter,
    Feedback,
    Model,
    ModelVersion,
    Node,
    Placement,
    PushedArtifact,
    QuotaPolicy,
    Rollout,
    Route,
    Tenant,
)


@dataclass(frozen=True)
class TenantView:
    name: str
    tier: str
    priority: int
    allowed_models: tuple[str, ...]
    disabled: bool
    weight: float = 1.0
    spill_to_job: bool = False
    active_keys: tuple[str, ...] = ()
    """Visible prefixes of the tenant's unrevoked keys."""


@dataclass(frozen=True)
class RouteView:
    model: str
    targets: tuple[tuple[str, int], ...]
    sticky: str
    salt: str
    fallback: str
    previous_targets: tuple[tuple[str, int], ...] = field(default=())
    shadow_version: str = ""
    shadow_percent: int = 0


class RegistryReader:
    """Queries the services, CLI and console use."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def revision(self) -> int:
        with Session(self._engine) as s:
            row = s.get(ConfigRevision, 1)
            return row.revision if row else 0

    def tenants(self) -> list[TenantView]:
        with Session(self._engine) as s:
            keys: dict[int, list[str]] = {}
            for key in s.exec(select(ApiKey).where(col(ApiKey.revoked_at).is_(None))):
                keys.setdefault(key.tenant_id, []).append(key.prefix)
            return [
                TenantView(
                    name=t.name,
                    tier=t.tier,
                    priority=t.priority,
                    allowed_models=tuple(t.allowed_models),
                    disabled=t.disabled,
                    weight=t.weight,
                    spill_to_job=t.spill_to_job,
                    active_keys=tuple(sorted(keys.get(t.id or 0, []))),
                )
                for t in s.exec(select(Tenant).order_by(Tenant.name))
            ]

    def quota_policies(self, tenant: str) -> list[QuotaPolicy]:
        with Session(self._engine) as s:
            return list(
                s.exec(
                    select(QuotaPolicy).join(Tenant).where(Tenant.name == tenant).order_by(QuotaPolicy.model)
                )
            )

    def models(self) -> list[Model]:
        with Session(self._engine) as s:
            return list(s.exec(select(Model).order_by(Model.name)))

    def versions(self, model: str) -> list[ModelVersion]:
        with Session(self._engine) as s:
            return list(
                s.exec(
                    select(ModelVersion).join(Model).where(Model.name == model).order_by(col(ModelVersion.id))
                )
            )

    def all_versions(self) -> list[tuple[str, ModelVersion]]:
        """Every version with its model's name."""
        with Session(self._engine) as s:
            rows = s.exec(select(Model.name, ModelVersion).join(ModelVersion).order_by(Model.name))
            return [(name, version) for name, version in rows]

    def route(self, model: str) -> RouteView | None:
        with Session(self._engine) as s:
            found = s.exec(select(Route, Model).join(Model).where(Model.name == model)).first()
            if found is None:
                return None
            route, _ = found
            return RouteView(
                model=model,
                targets=_pairs(route.targets),
                sticky=route.sticky,
                salt=route.salt,
                fallback=route.fallback_model,
                previous_targets=_pairs(route.previous_targets),
                shadow_version=route.shadow_version,
                shadow_percent=route.shadow_percent,
            )

    def nodes(self) -> list[Node]:
        with Session(self._engine) as s:
            return list(s.exec(select(Node).order_by(Node.name)))

    def placements_for(self, node_name: str, pool: str = "") -> list[tuple[str, ModelVersion]]:
        """(model name, version row) pairs placed on this node, its pool, or every node."""
        with Session(self._engine) as s:
            rows = s.exec(
                select(Model.name, ModelVersion)
                .select_from(Placement)
                .join(ModelVersion, col(Placement.version_id) == col(ModelVersion.id))
                .join(Model, col(ModelVersion.model_id) == col(Model.id))
                .where(col(Placement.node_name).in_([node_name, pool or node_name, "*"]))
                .order_by(Model.name, ModelVersion.version)
            )
            return [(name, version) for name, version in rows]

    def placed_on(self, model: str, version: str) -> list[str]:
        """Where a version is placed: node or pool names, ``*`` for every node."""
        with Session(self._engine) as s:
            rows = s.exec(
                select(Placement.node_name)
                .join(ModelVersion, col(Placement.version_id) == col(ModelVersion.id))
                .join(Model, col(ModelVersion.model_id) == col(Model.id))
                .where(Model.name == model, ModelVersion.version == version)
            )
            return sorted(rows)

    def live_rollouts(self) -> list[Rollout]:
        """Every unfinished rollout."""
        with Session(self._engine) as s:
            return list(s.exec(select(Rollout).where(col(Rollout.active_model).is_not(None))))

    def rollouts(self, model: str = "", limit: int = 20) -> list[Rollout]:
        """Rollouts (of one model, or all), newest first."""
        query = select(Rollout).order_by(col(Rollout.id).desc()).limit(limit)
        if model:
            query = query.where(Rollout.model == model)
        with Session(self._engine) as s:
            return list(s.exec(query))

    def feedback_moments(self, model: str, metric: str, since: datetime | None = None) -> dict[str, Moments]:
        """Per version of ``model``: count, mean and variance of the ``metric`` reports
        (those made after ``since``, when given)."""
        value = col(Feedback.value)
        query = (
            select(Feedback.version, func.count(), func.avg(value), func.avg(value * value))
            .where(Feedback.model == model, Feedback.metric == metric)
            .group_by(Feedback.version)
        )
        if since is not None:
            query = query.where(col(Feedback.created_at) >= since)
        out: dict[str, Moments] = {}
        with Session(self._engine) as s:
            for version, n, mean, square in s.exec(query):
                spread = max(0.0, float(square) - float(mean) ** 2) * n / (n - 1) if n > 1 else 0.0
                out[version] = Moments(n=float(n), mean=float(mean), variance=spread)
        return out

    def node_versions(self, heartbeat_timeout_s: float) -> NodeVersions:
        """Where each version is ready and where it failed, from one read of the nodes."""
        return node_versions(self._engine, heartbeat_timeout_s)

    def ready_versions(self, heartbeat_timeout_s: float) -> dict[str, list[tuple[str, str]]]:
        """``model:version`` -> [(node, address)] of READY nodes with a fresh heartbeat."""
        return ready_versions(self._engine, heartbeat_timeout_s)

    def admin_password_hash(self) -> str | None:
        with Session(self._engine) as s:
            row = s.get(AdminCredential, 1)
            return row.password_hash if row else None

    def account(self, name: str) -> ConsoleAccount | None:
        with Session(self._engine) as s:
            return s.get(ConsoleAccount, name)

    def accounts(self) -> list[ConsoleAccount]:
        with Session(self._engine) as s:
            return list(s.exec(select(ConsoleAccount).order_by(col(ConsoleAccount.name))))

    def session_account(self, token: str) -> str | None:
        """Whose unexpired login ``token`` is, if anyone's."""
        with Session(self._engine) as s:
            row = s.get(ConsoleSession, token_digest(token))
            return row.account if row is not None and row.expires_at > time.time() else None

    def audit_events(self, limit: int = 100) -> list[AuditEvent]:
        with Session(self._engine) as s:
            return list(s.exec(select(AuditEvent).order_by(col(AuditEvent.id).desc()).limit(limit)))

    def route_changes(self, model: str, since: datetime, limit: int = 200) -> list[AuditEvent]:
        """The model's route and rollout writes since ``since``, newest first."""
        with Session(self._engine) as s:
            query = (
                select(AuditEvent)
                .where(col(AuditEvent.entity).in_(("route", "rollout")))
                .where(AuditEvent.entity_key == model)
                .where(AuditEvent.created_at >= since)
                .order_by(col(AuditEvent.id).desc())
                .limit(limit)
            )
            return list(s.exec(query))

    def dead_letter_count(self, since: datetime) -> int:
        """Dead letters recorded since ``since`` (one COUNT on the indexed timestamp)."""
        with Session(self._engine) as s:
            query = select(func.count()).select_from(DeadLetter).where(DeadLetter.created_at >= since)
            return int(s.exec(query).one())

    def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        with Session(self._engine) as s:
            return list(s.exec(select(DeadLetter).order_by(col(DeadLetter.id).desc()).limit(limit)))

    def pushed_artifact(self, sha256: str) -> PushedArtifact | None:
        """A pushed artifact's record (its kind and size), None when none was pushed."""
        with Session(self._engine) as s:
            return s.get(PushedArtifact, sha256)

    def artifact_chunks(self, sha256: str) -> Iterator[bytes]:
        """A pushed artifact's bytes, one chunk at a time (one row in memory at once)."""
        known = self.pushed_artifact(sha256)
        for seq in range(known.chunks if known else 0):
            with Session(self._engine) as s:
                row = s.get(ArtifactChunk, (sha256, seq))
            if row is None:
                raise LookupError(f"artifact {sha256[:12]}… lost its chunk {seq}")
            yield row.data


def _pairs(targets: list[dict[str, Any]]) -> tuple[tuple[str, int], ...]:
    return tuple((str(t["version"]), int(t["weight"])) for t in targets)
