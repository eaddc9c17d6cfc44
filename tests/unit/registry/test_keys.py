from __future__ import annotations

from ferryman_server.registry.keys import generate_key, hash_key, matches, parse_prefix


def test_keys_are_random_and_hash_verifies() -> None:
    a, b = generate_key(), generate_key()
    assert a.plaintext != b.plaintext and a.prefix != b.prefix
    assert a.plaintext not in a.key_hash
    assert matches(a.plaintext, a.key_hash)
    assert not matches(b.plaintext, a.key_hash)
    assert hash_key(a.plaintext) == a.key_hash


def test_prefix_is_visible_and_parsed() -> None:
    key = generate_key()
    assert key.plaintext.startswith(f"fm_{key.prefix}_")
    assert parse_prefix(key.plaintext) == key.prefix
    for bad in ("", "fm_", "sk_12345678_x", "fm_short_x", "Bearer abc"):
        assert parse_prefix(bad) is None
