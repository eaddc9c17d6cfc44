"""The console's password check: scrypt hashes, the environment fallback, nobody by default;
the login throttle, per account and per address, race-free (part of the abuse suite)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest

from ferryman_server.admin_ui import auth
from ferryman_server.admin_ui.auth import (
    BASE_LOCKOUT_S,
    FREE_ATTEMPTS,
    MAX_LOCKOUT_S,
    MAX_TRACKED,
    PASSWORD_ENV,
    LoginThrottle,
    check_login,
    hash_password,
    log_in,
    verify_password,
)
from ferryman_server.admin_ui.context import Person
from ferryman_server.registry.accounts import Role


def test_hashes_are_salted_and_verify() -> None:
    first, second = hash_password("s3cret-pass"), hash_password("s3cret-pass")
    assert first != second and first.startswith("scrypt$") and "s3cret" not in first
    assert verify_password("s3cret-pass", first) and verify_password("s3cret-pass", second)
    assert not verify_password("wrong", first)
    assert not verify_password("s3cret-pass", "md5$abc$def") and not verify_password("x", "garbage")


def test_registry_hash_wins_then_environment_then_nobody(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PASSWORD_ENV, raising=False)
    assert not check_login("", None) and not check_login("anything", None)
    monkeypatch.setenv(PASSWORD_ENV, "from-env")
    assert check_login("from-env", None) and not check_login("other", None)
    stored = hash_password("from-registry")
    assert check_login("from-registry", stored) and not check_login("from-env", stored)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_throttle_backs_off_per_account_and_a_success_clears_it() -> None:
    clock = Clock()
    throttle = LoginThrottle(clock)
    for n in range(FREE_ATTEMPTS):
        assert throttle.begin("ops", f"10.0.0.{n}").wait_s == 0  # every address fresh
    waits = []
    for n in range(4):
        refused = throttle.begin("ops", f"10.0.1.{n}")
        waits.append(refused.wait_s)
        clock.now += refused.wait_s
        assert throttle.begin("ops", f"10.0.1.{n}").wait_s == 0  # one attempt after each wait
    assert waits == [BASE_LOCKOUT_S, 2 * BASE_LOCKOUT_S, 4 * BASE_LOCKOUT_S, 8 * BASE_LOCKOUT_S]
    for n in range(30):
        clock.now += MAX_LOCKOUT_S
        assert throttle.begin("ops", f"10.0.2.{n}").wait_s == 0
    assert throttle.begin("ops", "10.0.3.1").wait_s == MAX_LOCKOUT_S  # 300 guesses cost days
    assert throttle.begin("dev", "10.0.3.2").wait_s == 0, "another account is not locked"
    clock.now += MAX_LOCKOUT_S
    throttle.succeeded(throttle.begin("ops", "10.0.3.3"))
    assert all(throttle.begin("ops", "10.0.3.4").wait_s == 0 for _ in range(FREE_ATTEMPTS - 1))


@pytest.mark.abuse
def test_an_attacker_keeping_an_account_locked_does_not_lock_its_operator_out() -> None:
    """Guessing admin from one address at each expiry keeps admin locked for that address;
    the operator, from an address that never failed, logs in with the right password (a
    wrong one from there gets the wait, and that address then waits like any other)."""
    clock = Clock()
    reader = Reader({"admin": "right-password"})
    throttle = LoginThrottle(clock)
    for n in range(20):
        outcome = log_in(throttle, reader, "admin", f"guess-{n}", "203.0.113.9")  # type: ignore[arg-type]
        clock.now += outcome if isinstance(outcome, float) else 0.0
    assert isinstance(log_in(throttle, reader, "admin", "guess-x", "203.0.113.9"), float)  # type: ignore[arg-type]
    assert log_in(throttle, reader, "admin", "typo", "192.0.2.4") > 0  # type: ignore[arg-type,operator]
    assert log_in(throttle, reader, "admin", "right-password", "192.0.2.4") > 0  # type: ignore[arg-type,operator]
    operator = log_in(throttle, reader, "admin", "right-password", "198.51.100.7")  # type: ignore[arg-type]
    assert operator == Person("admin", Role.OPERATOR)
    # One the console cannot tell is one address of its own, not everyone's.
    assert throttle.begin("admin", "").keys[1] == "address:unknown"


def test_an_address_guessing_many_accounts_is_slowed_down_alone() -> None:
    throttle = LoginThrottle(Clock())
    for n in range(FREE_ATTEMPTS):
        assert throttle.begin(f"name-{n}", "203.0.113.9").wait_s == 0
    assert throttle.begin("name-x", "203.0.113.9").wait_s > 0
    assert throttle.begin("name-x", "198.51.100.1").wait_s == 0, "the same name from elsewhere"


def test_remembered_keys_are_bounded() -> None:
    throttle = LoginThrottle(Clock())
    for n in range(MAX_TRACKED):
        throttle.begin(f"spray-{n}", "203.0.113.1")
    assert len(throttle._records) == MAX_TRACKED


@dataclass
class Account:
    name: str
    role: str
    password_hash: str


class Reader:
    """The two registry reads a login makes."""

    def __init__(self, accounts: dict[str, str]) -> None:
        self.accounts = {
            name: Account(name, Role.OPERATOR.value, hash_password(p)) for name, p in accounts.items()
        }

    def account(self, name: str) -> Account | None:
        return self.accounts.get(name)

    def admin_password_hash(self) -> str | None:
        return None


@pytest.mark.abuse
def test_forty_concurrent_attempts_get_the_free_checks_only_and_another_operator_logs_in(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The race the old throttle lost (29 checks of 40 went through, then everyone was
    locked out): the count is taken with the check, one account's lock is its own."""
    reader = Reader({"victim": "right-password", "colleague": "colleague-pass"})
    checks: list[str] = []
    real_verify = auth.verify_password

    def counted(password: str, stored: str) -> bool:
        checks.append(password)
        return real_verify(password, stored)

    monkeypatch.setattr(auth, "verify_password", counted)
    throttle = LoginThrottle()
    start = threading.Barrier(40)

    def guess(n: int) -> Person | float:
        start.wait()
        return log_in(throttle, reader, "victim", f"guess-{n}", f"203.0.113.{n % 4}")  # type: ignore[arg-type]

    with ThreadPoolExecutor(40) as pool:
        outcomes = list(pool.map(guess, range(40)))
    # The free checks, and at most one probe per address that had not failed when the
    # account locked (a right password from an address that never failed always logs in).
    assert FREE_ATTEMPTS <= len(checks) <= FREE_ATTEMPTS + 4, len(checks)
    assert sum(1 for o in outcomes if o == 0.0) == FREE_ATTEMPTS
    assert all(isinstance(o, float) and o > 0 for o in outcomes if o != 0.0)
    colleague = log_in(throttle, reader, "colleague", "colleague-pass", "198.51.100.7")  # type: ignore[arg-type]
    assert colleague == Person("colleague", Role.OPERATOR)
