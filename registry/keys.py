"""API keys: random, shown once, stored only as a hash.

A key looks like ``fm_<prefix>_<secret>``. The prefix is visible (support can name
a key without seeing it) and indexes the lookup; the whole key is hashed with
sha256, which is enough for 256-bit random secrets (no password stretching needed).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

KEY_SCHEME = "fm"
PREFIX_BYTES = 4  # 8 hex chars: visible, unique per registry
SECRET_BYTES = 32


@dataclass(frozen=True)
class NewKey:
    """A freshly issued key: ``plaintext`` is shown once and never stored."""

    prefix: str
    plaintext: str
    key_hash: str


def hash_key(plaintext: str) -> str:
    """sha256 hex of the whole key."""
    return hashlib.sha256(plaintext.encode()).hexdigest()


def generate_key() -> NewKey:
    """A new random key with its prefix and hash."""
    prefix = secrets.token_hex(PREFIX_BYTES)
    plaintext = f"{KEY_SCHEME}_{prefix}_{secrets.token_urlsafe(SECRET_BYTES)}"
    return NewKey(prefix=prefix, plaintext=plaintext, key_hash=hash_key(plaintext))


def parse_prefix(plaintext: str) -> str | None:
    """The visible prefix of a well-formed key, None for anything else."""
    parts = plaintext.split("_", 2)
    if len(parts) != 3 or parts[0] != KEY_SCHEME or len(parts[1]) != 2 * PREFIX_BYTES:
        return None
    return parts[1]


def matches(plaintext: str, key_hash: str) -> bool:
    """Constant-time check of a presented key against a stored hash."""
    return hmac.compare_digest(hash_key(plaintext), key_hash)
