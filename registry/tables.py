"""SQLModel tables of the registry.

Schema changes go through Alembic migrations (``registry/migrations``); a test
checks that the migrated schema matches these tables.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, Column, LargeBinary, UniqueConstraint
from sqlmodel import Field, SQLModel


def utcnow() -> datetime:
    """Timezone-aware now, the one clock of registry timestamps."""
    return datetime.now(UTC)


class ConfigRevision(SQLModel, table=True):
    """One row: bumped by every config write; services refresh when it moves."""

    __tablename__ = "config_revision"

    id: int = Field(default=1, primary_key=True)
    revision: int = 0
    updated_at: datetime = Field(default_factory=utcnow)


class Tenant(SQLModel, table=True):
    __tablename__ = "tenants"

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(index=True, unique=True, max_length=64)
    tier: str = Field(default="standard", max_length=32)
    priority: int = 2
    """Default scheduling class (ferryman.v1.Priority)."""
    allowed_models: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    """Restricts the tenant to these model aliases; empty: every model it may see
    (published ones and those it owns)."""
    disabled: bool = False
    weight: float = 1.0
    """Share of contended compute against other busy tenants (generation slots and tokens):
    a tenant of weight 2 gets twice the share of one of weight 1."""
    spill_to_job: bool = False
    """Every request of the tenant refused for load or a rate quota is accepted as a
    durable job instead (as a request's own ``spill_to_job`` asks)."""
    created_at: datetime = Field(default_factory=utcnow)


class ApiKey(SQLModel, table=True):
    __tablename__ = "api_keys"

    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenants.id", index=True)
    prefix: str = Field(index=True, unique=True, max_length=16)
    """Visible part of the key, for support and lookup."""
    key_hash: str = Field(max_length=128)
    """sha256 of the whole key; the key itself is never stored."""
    created_at: datetime = Field(default_factory=utcnow)
    revoked_at: datetime | None = None


class QuotaPolicy(SQLModel, table=True):
    __tablename__ = "quota_policies"
    __table_args__ = (UniqueConstraint("tenant_id", "model", name="uq_quota_tenant_model"),)

    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenants.id", index=True)
    model: str = Field(default="", max_length=64)
    """Model alias the limits apply to; empty means all of the tenant's traffic."""
    rpm: int | None = None
    tpm: int | None = None
    cost_per_day_usd: float | None = None
    burst: int | None = None
    max_concurrency: int | None = None
    mode: str = Field(default="hard", max_length=8)
    jobs_in_flight: int | None = None
    """Durable jobs the tenant may have unfinished at once (tenant-wide policies only)."""
    job_items_per_day: int | None = None
    """Job items the tenant may submit per UTC day (tenant-wide policies only)."""


class Model(SQLModel, table=True):
    __tablename__ = "models"

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(index=True, unique=True, max_length=64)
    description: str = ""
    published: bool = False
    """Usable by every tenant; otherwise only by its owners."""
    owners: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    """Tenants that may use the model while it is not published."""
    created_at: datetime = Field(default_factory=utcnow)


class ModelVersion(SQLModel, table=True):
    __tablename__ = "model_versions"
    __table_args__ = (UniqueConstraint("model_id", "version", name="uq_model_version"),)

    id: int | None = Field(default=None, primary_key=True)
    model_id: int = Field(foreign_key="models.id", index=True)
    version: str = Field(max_length=64)
    artifact_uri: str
    sha256: str = Field(max_length=64)
    format: str = Field(max_length=16)
    handler: str = ""
    """``module:Class`` for the python format."""
    io_schema: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    max_batch_size: int = 32
    max_queue_delay_ms: float = 10.0
    price_per_1k_tokens_usd: float = 0.0
    price_per_item_usd: float = 0.0
    cacheable: bool = False
    shareable: bool = False
    """Identical inputs of different tenants may share one execution."""
    status: str = Field(default="REGISTERED", max_length=16)
    created_at: datetime = Field(default_factory=utcnow)


class Route(SQLModel, table=True):
    __tablename__ = "routes"

    id: int | None = Field(default=None, primary_key=True)
    model_id: int = Field(foreign_key="models.id", unique=True)
    targets: list[dict[str, Any]] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    """``[{"version": "1", "weight": 90}, ...]``, weights summing to 100."""
    previous_targets: list[dict[str, Any]] = Field(
        default_factory=list, sa_column=Column(JSON, nullable=False)
    )
    """The targets before the last change, for one-step rollback."""
    sticky: str = Field(default="none", max_length=8)
    salt: str = Field(max_length=32)
    fallback_model: str = Field(default="", max_length=64)
    shadow_version: str = Field(default="", max_length=64)
    """A version that also gets a copy of ``shadow_percent`` % of the model's requests: it
    answers nobody, is never charged, and its outputs are compared with the live answers."""
    shadow_percent: int = 0
    updated_at: datetime = Field(default_factory=utcnow)


class Node(SQLModel, table=True):
    __tablename__ = "nodes"

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(index=True, unique=True, max_length=128)
    address: str = Field(max_length=256)
    device: str = Field(default="cpu", max_length=32)
    capacity: int = 1
    """Batches it runs at once."""
    lifecycle: str = Field(default="STARTING", max_length=16)
    loaded_versions: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    """``model:version`` names that are SERVING there."""
    failed_versions: dict[str, str] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    """``model:version`` -> why it failed there (fetch, checksum, load, warm-up)."""
    last_heartbeat: datetime = Field(default_factory=utcnow)


class Placement(SQLModel, table=True):
    __tablename__ = "placements"
    __table_args__ = (UniqueConstraint("version_id", "node_name", name="uq_placement"),)

    id: int | None = Field(default=None, primary_key=True)
    version_id: int = Field(foreign_key="model_versions.id", index=True)
    node_name: str = Field(max_length=128)
    """A node's name, or ``*`` for every node."""


class DeadLetter(SQLModel, table=True):
    __tablename__ = "dead_letters"

    id: int | None = Field(default=None, primary_key=True)
    model: str = Field(max_length=64, index=True)
    version: str = Field(max_length=64)
    request_id: str = Field(max_length=128)
    tenant: str = Field(max_length=64)
    input_sha256: str = Field(max_length=64)
    error: str
    created_at: datetime = Field(default_factory=utcnow, index=True)


class Rollout(SQLModel, table=True):
    """A progressive rollout of one model from its baseline version to a candidate, in
    weight steps gated by analysis (``ferryman_server.registry.rollout``)."""

    __tablename__ = "rollouts"

    id: int | None = Field(default=None, primary_key=True)
    model: str = Field(max_length=64, index=True)
    active_model: str | None = Field(default=None, max_length=64, unique=True)
    """The model's name while the rollout is not finished, else NULL: the database itself
    holds rollouts to one at a time per model."""
    baseline: str = Field(max_length=64)
    candidate: str = Field(max_length=64)
    steps: list[int] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    """The candidate's weight at each step, rising to 100."""
    step: int = 0
    """Index into ``steps``: the step running now (or about to, while warming)."""
    state: str = Field(max_length=16, index=True)
    dwell_s: float
    """Least time a step runs before a passing verdict may advance it."""
    gates: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    """The analysis' thresholds (``ferryman_server.kernel.canary.Gates`` fields)."""
    nodes: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    """Nodes serving the candidate when it got weight: one that stops pauses the rollout."""
    step_started_at: datetime | None = None
    last_check: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    """The latest verdict with its numbers (written on every check, without audit)."""
    reason: str = ""
    """Why it last paused or ended."""
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)


class Feedback(SQLModel, table=True):
    """A tenant's outcome metric for one of its requests (a click, a conversion, a rating),
    recorded against the version that served it."""

    __tablename__ = "feedback"
    __table_args__ = (UniqueConstraint("tenant", "request_id", "metric", name="uq_feedback_once"),)

    id: int | None = Field(default=None, primary_key=True)
    tenant: str = Field(max_length=64)
    request_id: str = Field(max_length=128)
    model: str = Field(max_length=64, index=True)
    version: str = Field(max_length=64)
    bucket: int = -1
    """The request's sticky bucket (0..99), -1 when the route is not sticky."""
    metric: str = Field(max_length=64)
    value: float
    created_at: datetime = Field(default_factory=utcnow, index=True)


ENTITY_KEY_CHARS = 200
"""An audit event's entity key (a name, or ``model:version@node``)."""


class AuditEvent(SQLModel, table=True):
    __tablename__ = "audit_events"

    id: int | None = Field(default=None, primary_key=True)
    revision: int = Field(index=True)
    actor: str = Field(max_length=64)
    action: str = Field(max_length=64, index=True)
    entity: str = Field(max_length=32)
    entity_key: str = Field(max_length=ENTITY_KEY_CHARS)
    detail: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    created_at: datetime = Field(default_factory=utcnow, index=True)


class AdminCredential(SQLModel, table=True):
    """One row: the console's admin password hash (scrypt); never the password."""

    __tablename__ = "admin_credentials"

    id: int = Field(default=1, primary_key=True)
    password_hash: str = Field(max_length=256)
    updated_at: datetime = Field(default_factory=utcnow)


class JobRow(SQLModel, table=True):
    """A durable job, when jobs live in the registry database (``ferryman_server.jobs.sql_store``:
    no Redis, the embedded platform)."""

    __tablename__ = "jobs"

    key: str = Field(primary_key=True, max_length=64)
    """sha256 of tenant and job id (``ferryman_server.jobs.store.job_key``'s digest)."""
    tenant: str = Field(max_length=64, index=True)
    job_id: str = Field(max_length=128)
    model: str = Field(max_length=64)
    version: str = Field(max_length=64)
    state: int
    total: int
    succeeded: int = 0
    failed: int = 0
    cost: float = 0.0
    created: float = Field(index=True)
    expires: float
    finished: float = 0.0
    digest: str = Field(max_length=64)
    parameters: dict[str, str] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    price: float
    price_1k: float
    uncharged: bool = Field(default=False, index=True)
    """Its cost grew since it was last charged to the tenant's spend."""


class JobItemRow(SQLModel, table=True):
    """One item of a job: its request, who holds it, and its result once recorded."""

    __tablename__ = "job_items"
    __table_args__ = (UniqueConstraint("job_key", "idx", name="uq_job_item"),)

    seq: int | None = Field(default=None, primary_key=True)
    """Queue order (items are taken oldest first)."""
    job_key: str = Field(max_length=64, index=True)
    idx: int
    payload: bytes = Field(sa_column=Column(LargeBinary, nullable=False))
    done: bool = Field(default=False, index=True)
    """Recorded, or dropped unrun (its job ended): never taken again."""
    claimed_by: str | None = Field(default=None, max_length=128)
    claimed_at: float | None = None
    result: bytes | None = Field(default=None, sa_column=Column(LargeBinary, nullable=True))


class JobFileRow(SQLModel, table=True):
    """A file a tenant uploaded for jobs (an OpenAI batch input), kept for the jobs'
    retention."""

    __tablename__ = "job_files"

    key: str = Field(primary_key=True, max_length=64)
    """sha256 of tenant and file id."""
    tenant: str = Field(max_length=64, index=True)
    file_id: str = Field(max_length=64)
    filename: str = Field(max_length=256)
    created: float = Field(index=True)
    content: bytes = Field(sa_column=Column(LargeBinary, nullable=False))


class ConsoleAccount(SQLModel, table=True):
    """A person who uses the console: a role and an scrypt hash, never the password."""

    __tablename__ = "console_accounts"

    name: str = Field(primary_key=True, max_length=64)
    role: str = Field(max_length=16)
    """viewer, operator or admin (``ferryman_server.registry.accounts.Role``)."""
    password_hash: str = Field(max_length=256)
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)


class ConsoleSession(SQLModel, table=True):
    """A console login that survives a browser reload; deleting the row logs it out."""

    __tablename__ = "console_sessions"

    token_sha256: str = Field(primary_key=True, max_length=64)
    """The cookie's token, hashed: a copy of this table lets nobody in."""
    account: str = Field(max_length=64, index=True)
    expires_at: float
    """Epoch seconds."""
    created_at: datetime = Field(default_factory=utcnow)


class PushedArtifact(SQLModel, table=True):
    """A model artifact ``ferryman model push`` stored in the registry itself, so every node
    that reaches the registry can fetch it (``ferryman://artifacts/<sha256>``)."""

    __tablename__ = "artifacts"

    sha256: str = Field(primary_key=True, max_length=64)
    """The artifact's digest (a directory's: its manifest's, ``ferryman_server.kernel.artifacts``)."""
    kind: str = Field(max_length=8)
    """``file``, or ``dir``: the chunks are then a tar of the directory."""
    size: int
    """Bytes stored (the file, or the tar)."""
    chunks: int
    created_at: datetime = Field(default_factory=utcnow)


class ArtifactChunk(SQLModel, table=True):
    """One piece of a pushed artifact, in order (a row stays far below any database's
    limit on one value, however large the model)."""

    __tablename__ = "artifact_chunks"

    sha256: str = Field(primary_key=True, max_length=64)
    seq: int = Field(primary_key=True)
    data: bytes = Field(sa_column=Column(LargeBinary, nullable=False))
