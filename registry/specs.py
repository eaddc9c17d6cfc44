"""Registry rows as the wire specs services exchange."""

from __future__ import annotations

from ferryman.v1 import node_pb2
from ferryman_kernel.schema import IOSchema
from registry.tables import ModelVersion


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
