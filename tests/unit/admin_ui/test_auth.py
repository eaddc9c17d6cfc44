"""The console's password check: scrypt hashes, the environment fallback, nobody by default."""

from __future__ import annotations

import pytest

from admin_ui.auth import (
    BASE_LOCKOUT_S,
    FREE_ATTEMPTS,
    MAX_LOCKOUT_S,
    PASSWORD_ENV,
    LoginThrottle,
    check_login,
    hash_password,
    verify_password,
)


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


def test_login_throttle_backs_off_after_free_attempts_and_resets_on_success() -> None:
    clock = Clock()
    throttle = LoginThrottle(clock)
    for _ in range(FREE_ATTEMPTS):
        throttle.record(False)
        assert throttle.wait_s() == 0
    waits = []
    for _ in range(4):
        throttle.record(False)
        waits.append(throttle.wait_s())
        clock.now += waits[-1]
    assert waits == [BASE_LOCKOUT_S, 2 * BASE_LOCKOUT_S, 4 * BASE_LOCKOUT_S, 8 * BASE_LOCKOUT_S]
    for _ in range(30):
        throttle.record(False)
    assert throttle.wait_s() == MAX_LOCKOUT_S  # 300 guesses cost hours, not 30 s
    throttle.record(True)
    assert throttle.wait_s() == 0
