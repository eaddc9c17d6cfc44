"""Row lookups that registry writes share inside their transactions."""

from __future__ import annotations

from sqlmodel import Session, select

from ferryman_server.registry import validation as v
from ferryman_server.registry.tables import Model, ModelVersion, Route, Tenant


def find_tenant(session: Session, name: str) -> Tenant | None:
    return session.exec(select(Tenant).where(Tenant.name == name)).first()


def tenant(session: Session, name: str) -> Tenant:
    row = find_tenant(session, name)
    if row is None:
        raise v.NotFound(f"no tenant {name!r}")
    return row


def model(session: Session, name: str) -> Model:
    row = session.exec(select(Model).where(Model.name == name)).first()
    if row is None:
        raise v.NotFound(f"no model {name!r}")
    return row


def find_version(session: Session, model_name: str, version: str) -> ModelVersion | None:
    return session.exec(
        select(ModelVersion).join(Model).where(Model.name == model_name, ModelVersion.version == version)
    ).first()


def version(session: Session, model_name: str, version_name: str) -> ModelVersion:
    row = find_version(session, model_name, version_name)
    if row is None:
        raise v.NotFound(f"no version {model_name}:{version_name}")
    return row


def route(session: Session, model_row: Model) -> Route | None:
    return session.exec(select(Route).where(Route.model_id == model_row.id)).first()
