"""Console accounts (people with roles) and their login sessions (part of ``RegistryWriter``).

Account changes are config: validated and audited like every other write. Sessions are
operational records (a login is not a config change): they neither bump the revision nor
audit, like node heartbeats.
"""

from __future__ import annotations

import enum
import hashlib
import re
import time

from sqlalchemy import delete
from sqlmodel import Session, col, select

from ferryman_server.registry import validation as v
from ferryman_server.registry.change import WriterBase
from ferryman_server.registry.tables import ConsoleAccount, ConsoleSession, utcnow

ACCOUNT_RE = re.compile(r"^(?=.{1,64}$)[a-z0-9][a-z0-9._+-]*(@[a-z0-9-]+(\.[a-z0-9-]+)+)?$")
"""A short name, or the e-mail address single sign-on vouches for (lowercase, 64 at most:
the audit log names people in 64 characters)."""
MAX_SESSIONS_PER_ACCOUNT = 20
"""Logins kept per person; the oldest goes first (a script logging in forever fills nothing)."""


class Role(enum.StrEnum):
    """What a person may do in the console, each role all of the one before it and more."""

    VIEWER = "viewer"
    OPERATOR = "operator"
    ADMIN = "admin"


class Permission(enum.StrEnum):
    VIEW = "view"
    OPERATE = "operate"
    """Routes and rollouts, quotas, draining nodes, cancelling jobs, version status."""
    MANAGE = "manage"
    """People, tenants and their keys, models: who and what exists."""


GRANTS: dict[Role, frozenset[Permission]] = {
    Role.VIEWER: frozenset({Permission.VIEW}),
    Role.OPERATOR: frozenset({Permission.VIEW, Permission.OPERATE}),
    Role.ADMIN: frozenset(Permission),
}


def allows(role: Role, permission: Permission) -> bool:
    return permission in GRANTS[role]


def check_account_name(name: str) -> str:
    if not ACCOUNT_RE.match(name):
        raise v.RegistryError(
            f"invalid account name {name[:80]!r}: "
            "use a lowercase name or e-mail address of at most 64 characters"
        )
    return name


def check_role(role: str) -> Role:
    try:
        return Role(role)
    except ValueError:
        raise v.RegistryError(f"invalid role {role!r}: use one of {', '.join(Role)}") from None


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class AccountWrites(WriterBase):
    """People and sessions."""

    def save_account(self, name: str, role: str, password_hash: str) -> None:
        """Create the account, or replace its role and password hash."""
        check_account_name(name)
        check_role(role)
        if not password_hash.startswith("scrypt$"):
            raise v.RegistryError("a console password must be stored as an scrypt hash")
        with self._change("account.save", "account", name) as c:
            row = c.session.get(ConsoleAccount, name)
            c.detail.update(role=role, created=row is None)
            row = row or ConsoleAccount(name=name, role=role, password_hash=password_hash)
            row.role, row.password_hash, row.updated_at = role, password_hash, utcnow()
            c.session.add(row)

    def set_account_role(self, name: str, role: str) -> None:
        check_role(role)
        with self._change("account.role", "account", name) as c:
            row = c.session.get(ConsoleAccount, name)
            if row is None:
                raise v.RegistryError(f"no account {name!r}")
            c.detail.update(old=row.role, new=role)
            row.role, row.updated_at = role, utcnow()
            c.session.add(row)

    def delete_account(self, name: str) -> None:
        """Remove the person and end every session of theirs."""
        with self._change("account.delete", "account", name) as c:
            row = c.session.get(ConsoleAccount, name)
            if row is None:
                raise v.RegistryError(f"no account {name!r}")
            c.session.delete(row)
            c.session.execute(delete(ConsoleSession).where(col(ConsoleSession.account) == name))

    def open_session(self, account: str, token: str, ttl_s: float) -> float:
        """Record a login under ``token`` (kept hashed); returns its expiry (epoch seconds)."""
        now = time.time()
        expires_at = now + ttl_s
        with Session(self._engine) as s:
            s.execute(delete(ConsoleSession).where(col(ConsoleSession.expires_at) <= now))
            kept = s.exec(
                select(ConsoleSession.token_sha256)
                .where(ConsoleSession.account == account)
                .order_by(col(ConsoleSession.expires_at).desc())
                .offset(MAX_SESSIONS_PER_ACCOUNT - 1)
            ).all()
            if kept:
                s.execute(delete(ConsoleSession).where(col(ConsoleSession.token_sha256).in_(kept)))
            s.add(ConsoleSession(token_sha256=token_digest(token), account=account, expires_at=expires_at))
            s.commit()
        return expires_at

    def close_session(self, token: str) -> None:
        with Session(self._engine) as s:
            s.execute(delete(ConsoleSession).where(col(ConsoleSession.token_sha256) == token_digest(token)))
            s.commit()
