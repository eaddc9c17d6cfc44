"""The console's admin password: scrypt-hashed, from the environment or the registry."""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets

SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
SALT_BYTES = 16
PASSWORD_ENV = "FERRYMAN_ADMIN_PASSWORD"


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
