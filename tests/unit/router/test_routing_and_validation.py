"""Route picking and input validation, pure."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest

from ferryman.tensors import encode
from ferryman.v1 import common_pb2
from ferryman_server.kernel.schema import IOSchema
from ferryman_server.kernel.schema_check import check_inputs
from ferryman_server.registry.snapshot import RouteRecord
from ferryman_server.router.routing import Choice, bucket, choose, resolve
from ferryman_server.router.validation import price, token_bound

CANARY = RouteRecord(model="m", targets=(("1", 90), ("2", 10)), sticky="user", salt="s4lt", fallback="fb")
ROUTES = {
    "m": CANARY,
    "fb": RouteRecord(model="fb", targets=(("9", 100),), sticky="none", salt="x", fallback=""),
}


def ANY_MODEL(model: str) -> bool:
    return True


def pick(**options: Any) -> Choice:
    """The route of model m for tenant t, user u1."""
    return resolve(ROUTES, "m", tenant="t", user="u1", **options)


def test_ninety_ten_split_over_2000_users_and_stickiness() -> None:
    picks = {f"u{i}": choose(CANARY, tenant="t", user=f"u{i}") for i in range(2000)}
    share = Counter(picks.values())["2"] / 2000
    assert 0.07 <= share <= 0.13
    assert all(choose(CANARY, tenant="t", user=u) == v for u, v in picks.items())


def test_sticky_tenant_and_random_routes() -> None:
    by_tenant = RouteRecord(model="m", targets=(("1", 50), ("2", 50)), sticky="tenant", salt="a", fallback="")
    assert len({choose(by_tenant, tenant="acme", user=f"u{i}") for i in range(50)}) == 1
    random = RouteRecord(model="m", targets=(("1", 50), ("2", 50)), sticky="none", salt="a", fallback="")
    assert choose(random, tenant="t", user="", rng=lambda: 0.2) == "1"
    assert choose(random, tenant="t", user="", rng=lambda: 0.7) == "2"
    assert 0 <= bucket("salt", "key") < 100


def test_fallback_when_not_ready_or_degraded_and_pins() -> None:
    ready = {("m", "1"), ("m", "2"), ("fb", "9")}

    def is_ready(model: str, version: str) -> bool:
        return (model, version) in ready

    assert not resolve(
        ROUTES, "m", tenant="t", user="u1", pin="", is_ready=is_ready, may_use=ANY_MODEL
    ).fallback
    degraded = resolve(
        ROUTES, "m", tenant="t", user="u1", pin="", is_ready=is_ready, may_use=ANY_MODEL, degrade=True
    )
    assert (degraded.model, degraded.version, degraded.fallback) == ("fb", "9", True)
    pinned = pick(pin="2", is_ready=is_ready, may_use=ANY_MODEL)
    assert (pinned.version, pinned.fallback) == ("2", False)
    nothing_ready = resolve(
        ROUTES, "m", tenant="t", user="u1", pin="", is_ready=lambda m, v: m == "fb", may_use=ANY_MODEL
    )
    assert nothing_ready.fallback
    with pytest.raises(LookupError):
        resolve(ROUTES, "nope", tenant="t", user="", pin="", is_ready=is_ready, may_use=ANY_MODEL)


def test_a_fallback_the_caller_may_not_use_is_never_taken() -> None:
    def private_fallback(model: str) -> bool:
        return model != "fb"

    degraded = resolve(
        ROUTES,
        "m",
        tenant="t",
        user="u1",
        pin="",
        is_ready=lambda m, v: True,
        may_use=private_fallback,
        degrade=True,
    )
    assert (degraded.model, degraded.fallback) == ("m", False)
    down = resolve(
        ROUTES, "m", tenant="t", user="u1", pin="", is_ready=lambda m, v: m == "fb", may_use=private_fallback
    )
    assert (down.model, down.fallback) == ("m", False)


SCHEMA = IOSchema.model_validate(
    {
        "inputs": [
            {"name": "x", "dtype": "FP32", "shape": [4]},
            {"name": "t", "text": True, "max_text_length": 5},
        ],
        "outputs": [{"name": "y", "dtype": "FP32", "shape": [1]}],
        "max_items": 3,
    }
)


def named(name: str, value: np.ndarray | list[str]) -> common_pb2.NamedTensor:
    if isinstance(value, list):
        return common_pb2.NamedTensor(name=name, text=common_pb2.TextList(values=value))
    return common_pb2.NamedTensor(name=name, tensor=encode(value))


def test_validation_accepts_good_input_and_names_each_problem() -> None:
    good = [named("x", np.zeros((2, 4), np.float32)), named("t", ["ab", "cd"])]
    checked = check_inputs(good, SCHEMA)
    assert (checked.rows, checked.violations) == (2, [])
    cases = {
        "inputs.x.dtype": [named("x", np.zeros((2, 4), np.int32)), named("t", ["a", "b"])],
        "inputs.x.shape": [named("x", np.zeros((2, 5), np.float32)), named("t", ["a", "b"])],
        "inputs.t": [named("x", np.zeros((1, 4), np.float32))],
        "inputs.t.values[0]": [named("x", np.zeros((1, 4), np.float32)), named("t", ["toolong"])],
        "inputs.zzz": [*good, named("zzz", np.zeros((2, 4), np.float32))],
    }
    for field, inputs in cases.items():
        violations = check_inputs(inputs, SCHEMA).violations
        assert field in [f for f, _ in violations], (field, violations)
    violations = check_inputs(
        [named("x", np.zeros((4, 4), np.float32)), named("t", ["a"] * 4)], SCHEMA
    ).violations
    assert any("limit of 3" in d for _, d in violations)
    violations = check_inputs(
        [named("x", np.zeros((2, 4), np.float32)), named("t", ["a"])], SCHEMA
    ).violations
    assert any("disagree" in d for _, d in violations)


def test_token_bound_and_price() -> None:
    # Bytes plus two markers per text: never below what a tokenizer can emit.
    assert token_bound([named("t", ["abcdefgh", "abc"])]) == 8 + 2 + 3 + 2
    assert token_bound([named("t", ["你好", "hi"])]) == 6 + 2 + 2 + 2
    assert token_bound([named("x", np.zeros((1, 4), np.float32))]) == 0
    assert price(items=2, tokens=500, per_item_usd=0.01, per_1k_tokens_usd=0.002) == pytest.approx(0.021)
