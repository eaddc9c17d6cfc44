"""The registry's one write path.

Every config change goes through ``RegistryWriter``: it validates, applies the
change, bumps the config revision and writes an audit event in one transaction, so
an invalid write leaves the database unchanged and every valid one is traceable.
Node heartbeats and dead letters are operational records, not config: they are
written here too, but neither bump the revision nor audit (they would drown both).
"""

from __future__ import annotations

import tarfile
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from pydantic import ValidationError
from sqlalchemy import delete, func, insert
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, select

from ferryman_server.kernel.artifacts import artifact_path, artifact_sha256, pushed_sha256
from ferryman_server.kernel.schema import IOSchema
from ferryman_server.registry import rows
from ferryman_server.registry import validation as v
from ferryman_server.registry.accounts import AccountWrites
from ferryman_server.registry.change import Change, WriterBase
from ferryman_server.registry.keys import NewKey, generate_key
from ferryman_server.registry.rollout.writes import RolloutWrites
from ferryman_server.registry.route_writes import RouteWrites
from ferryman_server.registry.specs import QuotaLimits
from ferryman_server.registry.states import (
    ModelFormat,
    NodeLifecycle,
    VersionStatus,
    next_node_lifecycle,
    next_version_status,
)
from ferryman_server.registry.tables import (
    ENTITY_KEY_CHARS,
    AdminCredential,
    ApiKey,
    ArtifactChunk,
    DeadLetter,
    Feedback,
    Model,
    ModelVersion,
    Node,
    Placement,
    PushedArtifact,
    QuotaPolicy,
    Tenant,
    utcnow,
)

JOB_LIMITS = ("jobs_in_flight", "job_items_per_day")


MAX_FAILURE_CHARS = 500
"""Of a failure's reason kept in the registry (a model's exception can be long)."""
PUSH_CHUNK_BYTES = 4 * 1024 * 1024
"""One row of a pushed artifact: far below any database's limit on one value."""


@dataclass(frozen=True)
class VersionSpec:
    """What ``register_version`` needs to know about a new model version."""

    model: str
    version: str
    artifact: str
    format: str
    io_schema: Mapping[str, Any]
    sha256: str = ""
    handler: str = ""
    description: str = ""
    max_batch_size: int = 32
    max_queue_delay_ms: float = 10.0
    price_per_1k_tokens_usd: float = 0.0
    price_per_item_usd: float = 0.0
    cacheable: bool = False
    shareable: bool = False
    published: bool = False
    """For a new model: usable by every tenant (else only by ``owners``)."""
    owners: tuple[str, ...] = ()
    """For a new model: the tenants that may use it while it is private."""


class RegistryWriter(RouteWrites, RolloutWrites, AccountWrites, WriterBase):
    """Validated, audited writes to the registry, each one transaction."""

    # -- tenants and keys -------------------------------------------------------

    def create_tenant(
        self,
        name: str,
        *,
        tier: str = "standard",
        priority: int = 2,
        allowed_models: Sequence[str] = (),
        weight: float = 1.0,
    ) -> NewKey:
        """Create a tenant with its first API key; the key's plaintext is returned once."""
        v.check_name("tenant", name)
        _check_priority(priority)
        v.check_weight(weight)
        with self._change("tenant.create", "tenant", name) as c:
            if rows.find_tenant(c.session, name) is not None:
                raise v.RegistryError(f"tenant {name!r} already exists")
            tenant = Tenant(
                name=name, tier=tier, priority=priority, allowed_models=list(allowed_models), weight=weight
            )
            c.session.add(tenant)
            c.session.flush()
            key = self._add_key(c, tenant)
            c.detail.update(tier=tier, priority=priority, allowed_models=list(allowed_models), weight=weight)
        return key

    def update_tenant(
        self,
        name: str,
        *,
        tier: str | None = None,
        priority: int | None = None,
        allowed_models: Sequence[str] | None = None,
        disabled: bool | None = None,
        weight: float | None = None,
        spill_to_job: bool | None = None,
    ) -> None:
        """Change a tenant's tier, default priority, allowed models, disabled flag, weight
        or spill policy."""
        if priority is not None:
            _check_priority(priority)
        if weight is not None:
            v.check_weight(weight)
        with self._change("tenant.update", "tenant", name) as c:
            tenant = rows.tenant(c.session, name)
            changes = {
                "tier": tier,
                "priority": priority,
                "allowed_models": list(allowed_models) if allowed_models is not None else None,
                "disabled": disabled,
                "weight": weight,
                "spill_to_job": spill_to_job,
            }
            for field, value in changes.items():
                if value is not None:
                    setattr(tenant, field, value)
                    c.detail[field] = value
            c.session.add(tenant)

    def issue_key(self, tenant_name: str) -> NewKey:
        """A new API key for the tenant; the plaintext is returned once."""
        with self._change("key.issue", "tenant", tenant_name) as c:
            return self._add_key(c, rows.tenant(c.session, tenant_name))

    @staticmethod
    def _add_key(change: Change, tenant: Tenant) -> NewKey:
        assert tenant.id is not None
        key = generate_key()
        change.session.add(ApiKey(tenant_id=tenant.id, prefix=key.prefix, key_hash=key.key_hash))
        change.detail["key_prefix"] = key.prefix
        return key

    def revoke_key(self, prefix: str) -> None:
        """Revoke the key with this visible prefix."""
        with self._change("key.revoke", "api_key", prefix) as c:
            key = c.session.exec(select(ApiKey).where(ApiKey.prefix == prefix)).first()
            if key is None:
                raise v.NotFound(f"no API key with prefix {prefix!r}")
            if key.revoked_at is not None:
                raise v.RegistryError(f"key {prefix!r} is already revoked")
            key.revoked_at = utcnow()
            c.session.add(key)

    def set_quota(self, tenant_name: str, limits: QuotaLimits, *, model: str = "") -> None:
        """Set (replace) the tenant's limits, for all traffic or for one model alias."""
        v.check_mode(limits.mode)
        for field in ("rpm", "tpm", "cost_per_day_usd", "burst", "max_concurrency", *JOB_LIMITS):
            v.check_limit(field, getattr(limits, field))
        if model and any(getattr(limits, field) is not None for field in JOB_LIMITS):
            raise v.RegistryError("job limits are the tenant's, not a model's: set them without --model")
        if limits.burst is not None and limits.rpm is not None and limits.burst > limits.rpm:
            raise v.RegistryError(f"burst ({limits.burst}) cannot exceed rpm ({limits.rpm})")
        if model:
            v.check_name("model", model)
        with self._change("quota.set", "tenant", f"{tenant_name}/{model or '*'}") as c:
            tenant = rows.tenant(c.session, tenant_name)
            policy = c.session.exec(
                select(QuotaPolicy).where(QuotaPolicy.tenant_id == tenant.id, QuotaPolicy.model == model)
            ).first() or QuotaPolicy(tenant_id=tenant.id or 0, model=model)
            for field, value in vars(limits).items():
                setattr(policy, field, value)
                c.detail[field] = value
            c.session.add(policy)

    # -- models, versions, routes ---------------------------------------------

    def register_version(self, spec: VersionSpec) -> ModelVersion:
        """Register a model version (creating the model on first use)."""
        v.check_name("model", spec.model)
        v.check_version(spec.version)
        fmt = v.check_format(spec.format)
        if not spec.artifact.strip():
            # An empty path would be read as the current directory.
            raise v.RegistryError(
                "the artifact is empty: give a path or file:// URI, s3://, http(s)://, "
                "or the ferryman://artifacts/... URI that ferryman model push printed"
            )
        if fmt == ModelFormat.PYTHON and ":" not in spec.handler:
            raise v.RegistryError("format python needs --handler module:Class")
        if spec.max_batch_size < 1:
            raise v.RegistryError("max batch size must be at least 1")
        try:
            schema = IOSchema.model_validate(dict(spec.io_schema))
        except ValidationError as exc:
            first = exc.errors()[0]
            raise v.RegistryError(f"invalid IO schema: {first['msg']} at {first['loc']}") from None
        digest = _artifact_digest(spec.artifact, spec.sha256)
        key = f"{spec.model}:{spec.version}"
        with self._change("version.register", "model_version", key) as c:
            if pushed_sha256(spec.artifact) and c.session.get(PushedArtifact, digest) is None:
                raise v.RegistryError(f"no artifact {digest[:12]}… was pushed (ferryman model push)")
            model = c.session.exec(select(Model).where(Model.name == spec.model)).first()
            if model is None:
                model = Model(
                    name=spec.model,
                    description=spec.description,
                    published=spec.published,
                    owners=[rows.tenant(c.session, t).name for t in spec.owners],
                )
                c.session.add(model)
                c.session.flush()
            elif rows.find_version(c.session, spec.model, spec.version) is not None:
                raise v.RegistryError(f"version {key} already exists")
            assert model.id is not None
            row = ModelVersion(
                model_id=model.id,
                version=spec.version,
                artifact_uri=spec.artifact,
                sha256=digest,
                format=fmt.value,
                handler=spec.handler,
                io_schema=schema.model_dump(mode="json"),
                max_batch_size=spec.max_batch_size,
                max_queue_delay_ms=spec.max_queue_delay_ms,
                price_per_1k_tokens_usd=spec.price_per_1k_tokens_usd,
                price_per_item_usd=spec.price_per_item_usd,
                cacheable=spec.cacheable,
                shareable=spec.shareable,
            )
            c.session.add(row)
            c.detail.update(artifact=spec.artifact, sha256=digest, format=fmt.value)
        return row

    def push_artifact(self, path: Path, chunk_bytes: int = PUSH_CHUNK_BYTES) -> PushedArtifact:
        """Store the file or directory at ``path`` in the registry (a directory as a tar), so
        every node that reaches the registry can fetch it; pushing it again is a no-op."""
        digest = artifact_sha256(path)
        with Session(self._engine, expire_on_commit=False) as session:
            # Looked up before the change: a second push neither bumps the revision (every
            # service would reload its snapshot for nothing) nor writes an audit event.
            known = session.get(PushedArtifact, digest)
        if known is not None:
            return known
        # Each chunk in a transaction of its own: one transaction for the whole upload held
        # SQLite's write lock for minutes (every heartbeat and write waited on it). Chunks no
        # record names are invisible: what an interrupted push left is written over.
        with Session(self._engine) as session:
            session.execute(delete(ArtifactChunk).where(ArtifactChunk.sha256 == digest))  # type: ignore[arg-type]
            session.commit()
        kind, size, seq = ("dir" if path.is_dir() else "file"), 0, 0
        with tempfile.TemporaryFile() as packed:
            if kind == "dir":
                with tarfile.open(fileobj=packed, mode="w") as tar:
                    tar.add(path, arcname=".")
                packed.seek(0)
                source: BinaryIO = packed
            else:
                source = path.open("rb")
            with source:
                while chunk := source.read(chunk_bytes):
                    with Session(self._engine) as session:
                        # Core inserts: the session keeps no object per chunk (a model is GBs).
                        session.execute(insert(ArtifactChunk).values(sha256=digest, seq=seq, data=chunk))
                        session.commit()
                    size, seq = size + len(chunk), seq + 1
        # The record, last and in the audited change: the artifact exists once it is whole.
        with self._change("artifact.push", "artifact", digest) as c:
            row = PushedArtifact(sha256=digest, kind=kind, size=size, chunks=seq)
            c.session.add(row)
            c.detail.update(sha256=digest, kind=kind, size=size)
        return row

    def set_model_access(
        self, model: str, *, published: bool | None = None, owners: Sequence[str] | None = None
    ) -> None:
        """Publish a model to every tenant or make it private to ``owners``."""
        with self._change("model.access", "model", model) as c:
            row = rows.model(c.session, model)
            if published is not None:
                row.published = published
            if owners is not None:
                row.owners = sorted({rows.tenant(c.session, t).name for t in owners})
            c.session.add(row)
            c.detail.update(published=row.published, owners=list(row.owners))

    def set_version_status(self, model: str, version: str, status: str) -> None:
        """Move a version along its lifecycle (REGISTERED -> ACTIVE -> ...)."""
        try:
            target = VersionStatus(status)
        except ValueError:
            raise v.RegistryError(f"status must be one of {[s.value for s in VersionStatus]}") from None
        with self._change("version.status", "model_version", f"{model}:{version}") as c:
            row = rows.version(c.session, model, version)
            row.status = next_version_status(VersionStatus(row.status), target).value
            c.session.add(row)
            c.detail["status"] = row.status

    @contextmanager
    def _placement(
        self, action: str, model: str, version: str, node_name: str
    ) -> Iterator[tuple[Change, int, Placement | None]]:
        """A placement change: (the change, the version's row id, the placement if it exists)."""
        if node_name != "*":
            v.check_name("node", node_name)
        with self._change(action, "placement", f"{model}:{version}@{node_name}") as c:
            row = rows.version(c.session, model, version)
            exists = c.session.exec(
                select(Placement).where(Placement.version_id == row.id, Placement.node_name == node_name)
            ).first()
            yield c, row.id or 0, exists

    def place(self, model: str, version: str, node_name: str = "*") -> None:
        """Ask nodes (one by name, a pool by its name, or ``*`` for all) to load this version."""
        with self._placement("placement.add", model, version, node_name) as (c, version_id, exists):
            if exists is not None:
                raise v.RegistryError(f"{model}:{version} is already placed on {node_name}")
            c.session.add(Placement(version_id=version_id, node_name=node_name))

    def unplace(self, model: str, version: str, node_name: str = "*") -> bool:
        """Take a placement back: the nodes it named unload the version (those another
        placement still names keep it). Whether there was one."""
        with self._placement("placement.remove", model, version, node_name) as (c, _, exists):
            if exists is not None:
                c.session.delete(exists)
                # Its failures go with it (a node still asked to load it says so again).
                key = f"{model}:{version}"
                for node in c.session.exec(select(Node)):
                    if key in (node.failed_versions or {}):
                        node.failed_versions = {k: r for k, r in node.failed_versions.items() if k != key}
                        c.session.add(node)
            c.detail["removed"] = exists is not None
        return exists is not None

    def set_admin_password_hash(self, password_hash: str) -> None:
        """Replace the console's admin password hash (the audit records that, not the hash)."""
        if not password_hash.startswith("scrypt$"):
            raise v.RegistryError("the admin password must be stored as an scrypt hash")
        with self._change("admin.password", "admin", "console") as c:
            row = c.session.get(AdminCredential, 1) or AdminCredential(id=1, password_hash=password_hash)
            row.password_hash, row.updated_at = password_hash, utcnow()
            c.session.add(row)

    # -- nodes and operational records ------------------------------------------

    def register_node(self, name: str, address: str, *, device: str, capacity: int) -> None:
        """A node announces itself (STARTING); a restart under the same name re-registers."""
        v.check_name("node", name)
        with self._change("node.register", "node", name) as c:
            node = c.session.exec(select(Node).where(Node.name == name)).first()
            if node is None:
                node = Node(name=name, address=address)
            else:
                if node.lifecycle != NodeLifecycle.GONE:
                    next_node_lifecycle(NodeLifecycle(node.lifecycle), NodeLifecycle.GONE)
                node.lifecycle = NodeLifecycle.STARTING.value
            node.address, node.device, node.capacity = address, device, capacity
            node.loaded_versions = []
            node.last_heartbeat = utcnow()
            c.session.add(node)
            c.detail.update(address=address, device=device, capacity=capacity)

    def set_node_lifecycle(self, name: str, lifecycle: str) -> None:
        """Move a node along STARTING -> READY -> DRAINING -> GONE."""
        with self._change("node.lifecycle", "node", name) as c:
            node = c.session.exec(select(Node).where(Node.name == name)).first()
            if node is None:
                raise v.NotFound(f"no node {name!r}")
            node.lifecycle = next_node_lifecycle(
                NodeLifecycle(node.lifecycle), NodeLifecycle(lifecycle)
            ).value
            c.session.add(node)
            c.detail["lifecycle"] = node.lifecycle

    def heartbeat(
        self, name: str, loaded_versions: Sequence[str], failed: Mapping[str, str] | None = None
    ) -> None:
        """Record that a node is alive, what it serves and what failed there, with why (no
        revision, no audit). A failure stays until the version serves on that node or its
        placement is taken back, so a node's restart does not make a broken version look fine
        (its heartbeats say nothing of it until it fails again)."""
        with Session(self._engine) as session:
            node = session.exec(select(Node).where(Node.name == name)).first()
            if node is None:
                raise v.NotFound(f"no node {name!r}")
            node.last_heartbeat = utcnow()
            node.loaded_versions = sorted(loaded_versions)
            serving = set(loaded_versions)
            kept = {k: r for k, r in (node.failed_versions or {}).items() if k not in serving}
            now = {k: r[:MAX_FAILURE_CHARS] for k, r in (failed or {}).items()}
            node.failed_versions = dict(sorted({**kept, **now}.items()))
            session.add(node)
            session.commit()

    def record_node_change(self, node: str, action: str, key: str, detail: Mapping[str, object]) -> None:
        """Audit what a node decided on its own (a load on demand, an eviction), as
        ``model:version@node``; nothing else changes."""
        with self._change(action, "placement", f"{key}@{node}"[:ENTITY_KEY_CHARS]) as c:
            c.detail.update(detail)

    def record_dead_letter(self, letter: DeadLetter) -> None:
        """Append a dead letter (an input the model failed on), without revision or audit."""
        with Session(self._engine) as session:
            session.add(letter)
            session.commit()

    def record_feedback(self, row: Feedback, max_metrics: int) -> None:
        """Record a tenant's outcome for a request, once per metric and at most
        ``max_metrics`` metrics per request (operational: no revision, no audit)."""
        with Session(self._engine) as session:
            taken = session.exec(
                select(func.count())
                .select_from(Feedback)
                .where(Feedback.tenant == row.tenant, Feedback.request_id == row.request_id)
            ).one()
            if taken >= max_metrics:
                raise v.RegistryError(f"request {row.request_id!r} already has {taken} feedback metrics")
            session.add(row)
            try:
                session.commit()
            except IntegrityError:
                session.rollback()
                raise v.RegistryError(f"{row.metric!r} was already reported for this request") from None


def _check_priority(priority: int) -> None:
    if priority not in (1, 2, 3):
        raise v.RegistryError("priority must be 1 (low), 2 (normal) or 3 (high)")


def _artifact_digest(artifact: str, declared: str) -> str:
    """The artifact's sha256: computed from a local file, checked against a declared one;
    a pushed artifact's is its URI's."""
    pushed = pushed_sha256(artifact)
    if pushed is not None:
        if not pushed or (declared and declared != pushed):
            raise v.RegistryError(
                f"{artifact[:100]!r} is not a pushed artifact's URI (ferryman model push prints it)"
            )
        return pushed
    path = artifact_path(artifact)
    if path is not None and path.exists():
        actual = artifact_sha256(path)
        if declared and v.check_sha256(declared) != actual:
            raise v.RegistryError(f"sha256 mismatch for {artifact}: file is {actual}")
        return actual
    if not declared:
        raise v.RegistryError(f"artifact {artifact} not found and no --sha256 given")
    return v.check_sha256(declared)
