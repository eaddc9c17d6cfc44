"""The client's address behind trusted proxies, and only behind them."""

from __future__ import annotations

import pytest

from ferryman_server.kernel.proxies import client_address, networks

PROXIES = networks("10.0.0.0/8, 127.0.0.1")


def test_an_untrusted_peer_is_the_client_whatever_it_claims() -> None:
    assert client_address("203.0.113.9", [("X-Forwarded-For", "198.51.100.1")], PROXIES) == "203.0.113.9"
    assert client_address("203.0.113.9", [("Forwarded", "for=198.51.100.1")], PROXIES) == "203.0.113.9"
    assert client_address("10.1.2.3", [("X-Forwarded-For", "198.51.100.1")], ()) == "10.1.2.3"


def test_behind_a_trusted_proxy_the_nearest_untrusted_hop_is_the_client() -> None:
    # The client put its own claim first; the proxies appended what they saw.
    headers = [("x-forwarded-for", "1.1.1.1, 198.51.100.7, 10.0.0.5")]
    assert client_address("10.0.0.2", headers, PROXIES) == "198.51.100.7"
    assert client_address("127.0.0.1", [("X-Forwarded-For", "127.0.0.2")], PROXIES) == "127.0.0.2"


def test_forwarded_wins_and_its_forms_parse() -> None:
    headers = [
        ("X-Forwarded-For", "192.0.2.1"),
        ("Forwarded", 'for="[2001:db8::1]:4711";proto=https, for=198.51.100.3:80;by=10.0.0.1'),
    ]
    assert client_address("10.0.0.2", headers, PROXIES) == "198.51.100.3"
    assert client_address("10.0.0.2", [("Forwarded", 'for="[2001:db8::1]:4711"')], PROXIES) == "2001:db8::1"


@pytest.mark.parametrize(
    "headers",
    [[], [("X-Forwarded-For", "")], [("X-Forwarded-For", "not-an-address")], [("Forwarded", "for=_hidden")]],
)
def test_nothing_usable_forwarded_is_the_proxy_itself(headers: list[tuple[str, str]]) -> None:
    assert client_address("10.0.0.2", headers, PROXIES) == "10.0.0.2"


def test_every_hop_trusted_is_the_farthest_and_long_chains_are_cut() -> None:
    assert client_address("10.0.0.2", [("X-Forwarded-For", "10.0.0.9, 10.0.0.5")], PROXIES) == "10.0.0.9"
    chain = ", ".join(["198.51.100.1"] * 10_000 + ["198.51.100.2"])
    assert client_address("10.0.0.2", [("X-Forwarded-For", chain)], PROXIES) == "198.51.100.2"
