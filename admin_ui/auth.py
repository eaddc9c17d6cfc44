"""Console passwords: scrypt-hashed, checked per account, and the platform's admin password
(from the registry or the environment) for the bootstrap ``admin``."""

from __future__ import annotations

import functools
import hashlib
import hmac
import os
import secrets
import threading
import time
from collections.abc import Callable

from admin_ui.context import Person
from registry.accounts import Role
from registry.reader import RegistryReader

SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
SALT_BYTES = 16
PASSWORD_ENV = "FERRYMAN_ADMIN_PASSWORD"
BOOTSTRAP_ACCOUNT = "admin"
"""The name that logs in with the platform's admin password while no account has it."""


def hash_password(password: str) -> str:
    """``scrypt$<salt hex>$<hash hex>``."""
    salt = secrets.token_bytes(SALT_BYTES)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P)
    return f"scrypt${salt.hex()}${digest.hex()}"


def verify_password(password: str, stored: str) -> bool:
    try:
        scheme, salt_hex, digest_hex = stored.split("$")
    except ValueError:
        return False
    if scheme != "scrypt":
        return False
    digest = hashlib.scrypt(
        password.encode(), salt=bytes.fromhex(salt_hex), n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P
    )
    return hmac.compare_digest(digest.hex(), digest_hex)


def check_login(password: str, stored_hash: str | None) -> bool:
    """The registry's hash wins; without one, FERRYMAN_ADMIN_PASSWORD; without both, nobody."""
    if stored_hash:
        return verify_password(password, stored_hash)
    expected = os.environ.get(PASSWORD_ENV, "")
    return bool(expected) and hmac.compare_digest(password.encode(), expected.encode())


MAX_NAME_CHARS = 64
MAX_PASSWORD_CHARS = 256
"""What a login form takes at most (the server refuses longer, whatever the browser sent)."""


@functools.cache
def _decoy_hash() -> str:
    return hash_password(secrets.token_urlsafe(SALT_BYTES))


def authenticate(reader: RegistryReader, name: str, password: str) -> Person | None:
    """The person whose name and password these are. ``admin`` without an account of that
    name logs in with the platform's admin password, so a fresh platform has a way in.
    An unknown name costs the same scrypt as a known one: timing tells no names."""
    if len(name) > MAX_NAME_CHARS or len(password) > MAX_PASSWORD_CHARS:
        return None
    account = reader.account(name)
    if account is not None:
        return (
            Person(account.name, Role(account.role))
            if verify_password(password, account.password_hash)
            else None
        )
    if name == BOOTSTRAP_ACCOUNT and check_login(password, reader.admin_password_hash()):
        return Person(BOOTSTRAP_ACCOUNT, Role.ADMIN)
    verify_password(password, _decoy_hash())
    return None


FREE_ATTEMPTS = 5
"""Wrong passwords allowed before logins are slowed down."""
BASE_LOCKOUT_S = 2.0
MAX_LOCKOUT_S = 900.0


class LoginThrottle:
    """Slows password guessing: after FREE_ATTEMPTS failures every further one locks logins
    for twice as long as the last (2 s, 4 s, ... up to 15 min); a success resets it.

    One per console process, across sessions: a new browser session must not reset it.
    (An attacker can thereby delay the operator's login; the notice says until when.)"""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._failures = 0
        self._locked_until = 0.0

    def wait_s(self) -> float:
        """Seconds until a login may be tried again (0 when now)."""
        with self._lock:
            return max(0.0, self._locked_until - self._clock())

    def record(self, success: bool) -> None:
        with self._lock:
            if success:
                self._failures, self._locked_until = 0, 0.0
                return
            self._failures += 1
            if self._failures > FREE_ATTEMPTS:
                lockout = min(MAX_LOCKOUT_S, BASE_LOCKOUT_S * 2 ** (self._failures - FREE_ATTEMPTS - 1))
                self._locked_until = self._clock() + lockout
