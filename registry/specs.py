"""Registry values the services exchange: a quota policy's limits (what writes take and
snapshots carry), and a version as the wire spec a node loads."""

from __future__ import annotations

from dataclasses import dataclass, fields

from ferryman.v1 import node_pb2
from ferryman_server.kernel.schema import IOSchema
from ferryman_server.registry.tables import ModelVersion


@dataclass(frozen=True)
class QuotaLimits:
    """Limits of one quota policy; None means unlimited."""

    rpm: int | None = None
    tpm: int | None = None
    cost_per_day_usd: float | None = None
    burst: int | None = None
    max_concurrency: int | None = None
    mode: str = "hard"
    jobs_in_flight: int | None = None
    """Unfinished durable jobs at once (tenant-wide only)."""
    job_items_per_day: int | None = None
    """Job items submitted per UTC day (tenant-wide only)."""

    @classmethod
    def of(cls, row: object) -> QuotaLimits:
        """The limits a policy row (or anything with the same fields) holds."""
        return cls(**{f.name: getattr(row, f.name) for f in fields(cls)})


def version_spec(model: str, row: ModelVersion) -> node_pb2.ModelVersionSpec:
    """What a node needs to load ``row`` (a version of ``model``)."""
    return node_pb2.ModelVersionSpec(
        model=model,
        version=row.version,
        artifact_uri=row.artifact_uri,
        sha256=row.sha256,
        format=row.format,
        handler=row.handler,
        schema=IOSchema.model_validate(row.io_schema).to_proto(),
        max_batch_size=row.max_batch_size,
    )
