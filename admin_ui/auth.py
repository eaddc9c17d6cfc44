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
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from ferryman_server.admin_ui.context import Person
from ferryman_server.registry.accounts import Role
from ferryman_server.registry.reader import RegistryReader

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
"""Password checks an account (or a client address) gets before they are slowed down."""
BASE_LOCKOUT_S = 2.0
MAX_LOCKOUT_S = 900.0
MAX_TRACKED = 10_000
"""Accounts and addresses remembered at once (the least recently tried are forgotten)."""


@dataclass
class _Record:
    failures: int = 0
    """Attempts counted against the key since its last success (counted before the check)."""
    locked_until: float = 0.0


@dataclass(frozen=True)
class Attempt:
    """A password check the throttle let through; ``wait_s`` > 0: refused, retry after it,
    unless ``probe``: the account is locked but this address never failed, so its password
    is checked all the same (right, it logs in; wrong, the wait is the answer)."""

    keys: tuple[str, ...] = ()
    wait_s: float = 0.0
    probe: bool = False


class LoginThrottle:
    """Slows password guessing per account and per client address, never for everyone.

    An attempt is counted as a failure before its password is checked, in the same step as
    the check that it may go ahead (one lock), so concurrent sessions cannot slip checks
    in between: of any burst, FREE_ATTEMPTS checks go through for an account or an address,
    and each attempt after them locks that key for twice as long as the last (2 s, 4 s, ...
    up to 15 min). A success clears its account and address. One attacker can slow down
    the accounts it names and its own address, not another operator's login: an address
    that never failed has its password checked even while the account is locked (a probe,
    counted against that address only), so a right password from it always logs in, and
    an attacker who keeps an account locked does not lock its operator out. Spread over
    many addresses, guessing gets one check per new address.

    One per console process, across sessions: a new browser session must not reset it.
    The address is the client's behind trusted proxies (``FERRYMAN_TRUSTED_PROXIES``); one
    the console cannot tell (Streamlit gives none on loopback) is the key ``unknown``."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._records: OrderedDict[str, _Record] = OrderedDict()

    def begin(self, account: str, address: str) -> Attempt:
        """Count an attempt for ``account`` from ``address`` and say whether it may go on."""
        keys = (f"account:{account[:MAX_NAME_CHARS]}", f"address:{address or 'unknown'}")
        now = self._clock()
        with self._lock:
            records = [self._record(key) for key in keys]
            account_wait, address_wait = (r.locked_until - now for r in records)
            if address_wait > 0:
                return Attempt(wait_s=address_wait)
            if account_wait > 0:
                if records[1].failures:
                    return Attempt(wait_s=account_wait)
                records[1].failures += 1  # a probe: its address is no longer one that never failed
                return Attempt(keys=keys, wait_s=account_wait, probe=True)
            for record in records:
                record.failures += 1
                if record.failures >= FREE_ATTEMPTS:
                    extra = record.failures - FREE_ATTEMPTS
                    record.locked_until = now + min(MAX_LOCKOUT_S, BASE_LOCKOUT_S * 2**extra)
            return Attempt(keys=keys)

    def succeeded(self, attempt: Attempt) -> None:
        """The attempt's password was right: its account and address start afresh."""
        with self._lock:
            for key in attempt.keys:
                self._records.pop(key, None)

    def _record(self, key: str) -> _Record:
        record = self._records.pop(key, None) or _Record()
        self._records[key] = record  # the most recently tried last
        while len(self._records) > MAX_TRACKED:
            self._records.popitem(last=False)
        return record


def log_in(
    throttle: LoginThrottle, reader: RegistryReader, name: str, password: str, address: str
) -> Person | float:
    """The person these credentials name, or the seconds to wait before trying again
    (0.0: wrong name or password). The throttle counts the attempt before the check."""
    attempt = throttle.begin(name, address)
    if attempt.wait_s > 0 and not attempt.probe:
        return attempt.wait_s
    person = authenticate(reader, name, password)
    if person is None:
        return attempt.wait_s
    throttle.succeeded(attempt)
    return person
