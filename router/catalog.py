"""What a tenant may see of the models: their descriptions, versions and readiness, straight
from the registry snapshot (the doors ask per request). Unknown and forbidden models answer
alike, so model names do not leak across tenants."""

from __future__ import annotations

import grpc

from ferryman.errors import Reason
from ferryman.v1 import inference_pb2
from ferryman_server.registry.cache import SnapshotCache
from ferryman_server.registry.snapshot import RouteRecord, TenantRecord, VersionRecord
from ferryman_server.router.bounds import clip
from ferryman_server.router.failures import fail, unknown_model


class ModelCatalog:
    def __init__(self, cache: SnapshotCache) -> None:
        self._cache = cache

    def list_models(self, tenant: TenantRecord) -> inference_pb2.ListModelsResponse:
        snapshot = self._cache.snapshot
        visible = [n for n in sorted(snapshot.routes) if snapshot.may_use(tenant, n)]
        return inference_pb2.ListModelsResponse(models=[self._model_info(n) for n in visible])

    def get_model(self, tenant: TenantRecord, model: str) -> inference_pb2.ModelInfo:
        """A model the tenant may use (unknown and forbidden ones raise alike)."""
        self._route(tenant, model)
        return self._model_info(model)

    def _route(self, tenant: TenantRecord, model: str) -> RouteRecord:
        """The route of a model the tenant may use (unknown and forbidden ones raise alike)."""
        snapshot = self._cache.snapshot
        route = snapshot.routes.get(model)
        if route is None or not snapshot.may_use(tenant, model):
            raise unknown_model(model)
        return route

    def version(self, tenant: TenantRecord, model: str, version: str = "") -> VersionRecord:
        """A visible version of a model the tenant may use; empty ``version``: the one the
        route sends most traffic to. Straight from the snapshot: doors ask it per request."""
        route = self._route(tenant, model)
        if not version:
            version = max(route.targets, key=lambda target: target[1], default=("", 0))[0]
        record = self._cache.snapshot.versions.get(f"{model}:{version}")
        if record is None or record.status not in ("ACTIVE", "DEPRECATED"):
            raise fail(
                grpc.StatusCode.NOT_FOUND,
                f"unknown version {clip(model)}:{clip(version)}",
                Reason.UNKNOWN_VERSION,
            )
        return record

    def ready(self, tenant: TenantRecord, model: str, version: str = "") -> bool:
        """Whether a replica serves the version (empty: any version the route sends traffic to)."""
        route = self._route(tenant, model)
        if version:
            return self._cache.is_ready(model, self.version(tenant, model, version).version)
        return any(self._cache.is_ready(model, v) for v, weight in route.targets if weight > 0)

    def _model_info(self, model: str) -> inference_pb2.ModelInfo:
        snapshot = self._cache.snapshot
        route = snapshot.routes[model]
        weights = dict(route.targets)
        versions = [
            inference_pb2.VersionInfo(
                version=v.version,
                status=v.status,
                weight=weights.get(v.version, 0),
                schema=v.schema.to_proto(),
            )
            for key, v in sorted(snapshot.versions.items())
            if v.model == model and v.status in ("ACTIVE", "DEPRECATED")
        ]
        return inference_pb2.ModelInfo(
            name=model,
            description=snapshot.descriptions.get(model, ""),
            versions=versions,
            fallback=route.fallback,
        )
