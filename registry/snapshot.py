"""A consistent, read-only copy of the config services serve from.

Services load a snapshot when the config revision moves and keep serving on the
last good one while the registry is unreachable. Node readiness (heartbeats) changes
without a revision bump, so it is read on every refresh.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import Engine
from sqlmodel import Session, select

from ferryman_server.kernel.schema import IOSchema
from ferryman_server.registry.specs import QuotaLimits
from ferryman_server.registry.tables import (
    ApiKey,
    ConfigRevision,
    Model,
    ModelVersion,
    Node,
    QuotaPolicy,
    Route,
    Tenant,
)


@dataclass(frozen=True)
class KeyRecord:
    tenant: str
    key_hash: str
    revoked: bool


@dataclass(frozen=True)
class TenantRecord:
    name: str
    priority: int
    allowed_models: frozenset[str]
    disabled: bool
    weight: float = 1.0
    """Share of contended compute against other busy tenants."""
    spill_to_job: bool = False
    """Requests refused for load or a rate quota become durable jobs (``ferryman_server.router.spill``)."""


@dataclass(frozen=True)
class VersionRecord:
    model: str
    version: str
    status: str
    schema: IOSchema
    max_batch_size: int
    price_per_1k_tokens_usd: float
    price_per_item_usd: float
    description: str = ""
    format: str = ""
    """How nodes run it ("causal_lm" versions generate: Inference.Generate, not Predict)."""


@dataclass(frozen=True)
class RouteRecord:
    model: str
    targets: tuple[tuple[str, int], ...]
    sticky: str
    salt: str
    fallback: str
    shadow_version: str = ""
    shadow_percent: int = 0
    """Share of requests mirrored to ``shadow_version`` (0: none)."""


@dataclass(frozen=True)
class PolicyRecord:
    """A tenant's quota policy, for all its traffic (``model`` empty) or one model's."""

    tenant: str
    model: str
    limits: QuotaLimits


@dataclass(frozen=True)
class ModelAccess:
    published: bool
    owners: frozenset[str]


@dataclass(frozen=True)
class ConfigSnapshot:
    revision: int
    keys: dict[str, KeyRecord] = field(default_factory=dict)
    """By visible key prefix."""
    tenants: dict[str, TenantRecord] = field(default_factory=dict)
    versions: dict[str, VersionRecord] = field(default_factory=dict)
    """By ``model:version``."""
    routes: dict[str, RouteRecord] = field(default_factory=dict)
    policies: dict[str, list[PolicyRecord]] = field(default_factory=dict)
    """By tenant."""
    descriptions: dict[str, str] = field(default_factory=dict)
    access: dict[str, ModelAccess] = field(default_factory=dict)
    """Who may use each model (by alias); a model missing here is usable by nobody."""

    def may_use(self, tenant: TenantRecord, model: str) -> bool:
        """The one rule of model access: published or owned, within the tenant's allow-list."""
        access = self.access.get(model)
        if access is None or not (access.published or tenant.name in access.owners):
            return False
        return not tenant.allowed_models or model in tenant.allowed_models


def read_revision(engine: Engine) -> int:
    with Session(engine) as s:
        row = s.get(ConfigRevision, 1)
        return row.revision if row else 0


def load_snapshot(engine: Engine) -> ConfigSnapshot:
    """Everything in one read transaction, so the copy is consistent."""
    with Session(engine) as s:
        revision_row = s.get(ConfigRevision, 1)
        tenants_by_id = {t.id: t for t in s.exec(select(Tenant))}
        models_by_id = {m.id: m for m in s.exec(select(Model))}
        snapshot = ConfigSnapshot(revision=revision_row.revision if revision_row else 0)
        for tenant in tenants_by_id.values():
            snapshot.tenants[tenant.name] = TenantRecord(
                name=tenant.name,
                priority=tenant.priority,
                allowed_models=frozenset(tenant.allowed_models),
                disabled=tenant.disabled,
                weight=tenant.weight,
                spill_to_job=tenant.spill_to_job,
            )
        for key in s.exec(select(ApiKey)):
            owner = tenants_by_id.get(key.tenant_id)
            if owner is not None:
                snapshot.keys[key.prefix] = KeyRecord(owner.name, key.key_hash, key.revoked_at is not None)
        for row in s.exec(select(ModelVersion)):
            model = models_by_id[row.model_id]
            schema = IOSchema.model_validate(row.io_schema)
            # One request is batched whole: its items are bounded by the batch size too, so the
            # router refuses what the batcher could never take (MiniLM's schema says 64, its
            # batches hold 32), on every door and for jobs alike.
            schema = schema.model_copy(update={"max_items": min(schema.max_items, row.max_batch_size)})
            snapshot.versions[f"{model.name}:{row.version}"] = VersionRecord(
                model=model.name,
                version=row.version,
                status=row.status,
                schema=schema,
                max_batch_size=row.max_batch_size,
                price_per_1k_tokens_usd=row.price_per_1k_tokens_usd,
                price_per_item_usd=row.price_per_item_usd,
                format=row.format,
            )
        for model in models_by_id.values():
            snapshot.descriptions[model.name] = model.description
            snapshot.access[model.name] = ModelAccess(model.published, frozenset(model.owners))
        for route in s.exec(select(Route)):
            model = models_by_id[route.model_id]
            snapshot.routes[model.name] = RouteRecord(
                model=model.name,
                targets=tuple((str(t["version"]), int(t["weight"])) for t in route.targets),
                sticky=route.sticky,
                salt=route.salt,
                fallback=route.fallback_model,
                shadow_version=route.shadow_version,
                shadow_percent=route.shadow_percent,
            )
        for policy in s.exec(select(QuotaPolicy)):
            owner = tenants_by_id.get(policy.tenant_id)
            if owner is not None:
                snapshot.policies.setdefault(owner.name, []).append(
                    PolicyRecord(owner.name, policy.model, QuotaLimits.of(policy))
                )
        return snapshot


def heartbeat_age_s(node: Node, now: datetime) -> float:
    """Seconds since the node's last heartbeat (SQLite returns naive UTC timestamps)."""
    beat = node.last_heartbeat if node.last_heartbeat.tzinfo else node.last_heartbeat.replace(tzinfo=UTC)
    return (now - beat).total_seconds()


@dataclass(frozen=True)
class NodeVersions:
    """What the live nodes say of each version, from one read of the nodes table."""

    ready: dict[str, list[tuple[str, str]]]
    """``model:version`` -> [(node name, address)] of READY nodes with a fresh heartbeat."""
    failed: dict[str, list[tuple[str, str]]]
    """``model:version`` -> [(node name, why)] of live nodes on which it failed."""
    nodes: dict[str, str] = field(default_factory=dict)
    """Node name -> address of every READY node with a fresh heartbeat, serving or not
    (where a version placed nowhere may be loaded on demand)."""


def node_versions(engine: Engine, heartbeat_timeout_s: float) -> NodeVersions:
    now = datetime.now(UTC)
    found = NodeVersions({}, {})
    with Session(engine) as s:
        for node in s.exec(select(Node)):
            if heartbeat_age_s(node, now) > heartbeat_timeout_s:
                continue
            for key, reason in sorted((node.failed_versions or {}).items()):
                found.failed.setdefault(key, []).append((node.name, reason))
            if node.lifecycle == "READY":
                found.nodes[node.name] = node.address
                for key in node.loaded_versions:
                    found.ready.setdefault(key, []).append((node.name, node.address))
    return found


def ready_versions(engine: Engine, heartbeat_timeout_s: float) -> dict[str, list[tuple[str, str]]]:
    """``NodeVersions.ready``."""
    return node_versions(engine, heartbeat_timeout_s).ready
