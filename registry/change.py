"""The transaction every config write runs in: validate, apply, bump the config revision
and write an audit event, all committed together or not at all."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from ferryman_server.registry import validation as v
from ferryman_server.registry.states import InvalidTransition
from ferryman_server.registry.tables import AuditEvent, ConfigRevision, utcnow


@dataclass
class Change:
    """The open transaction of one write: where the audit detail accumulates."""

    session: Session
    detail: dict[str, Any]


class WriterBase:
    """What the registry writer's parts share: the engine, the actor and ``_change``."""

    def __init__(self, engine: Engine, actor: str = "cli") -> None:
        self._engine = engine
        self.actor = actor

    @contextmanager
    def _change(self, action: str, entity: str, key: str) -> Iterator[Change]:
        # Rows returned to callers stay readable after the commit.
        with Session(self._engine, expire_on_commit=False) as session:
            change = Change(session=session, detail={})
            try:
                yield change
                session.flush()
                revision = self._bump_revision(session)
                session.add(
                    AuditEvent(
                        revision=revision,
                        actor=self.actor,
                        action=action,
                        entity=entity,
                        entity_key=key,
                        detail=change.detail,
                    )
                )
                session.commit()
            except InvalidTransition as exc:
                session.rollback()
                raise v.RegistryError(str(exc)) from exc
            except IntegrityError as exc:
                # A concurrent writer got there first (a unique row): nothing was changed.
                session.rollback()
                raise v.RegistryError(f"{entity} {key!r} changed concurrently: {action} refused") from exc
            except BaseException:
                session.rollback()
                raise

    @staticmethod
    def _bump_revision(session: Session) -> int:
        # One UPDATE ... RETURNING-free statement; the row lock serializes writers.
        session.execute(
            update(ConfigRevision)
            .where(ConfigRevision.id == 1)  # type: ignore[arg-type]
            .values(revision=ConfigRevision.revision + 1, updated_at=utcnow())
        )
        row = session.get(ConfigRevision, 1, populate_existing=True)
        if row is None:
            raise v.RegistryError("registry is not migrated: run `ferryman db upgrade`")
        return row.revision
