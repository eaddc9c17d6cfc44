from __future__ import annotations

import pytest

from ferryman_server.registry.states import (
    InvalidTransition,
    NodeLifecycle,
    VersionStatus,
    next_node_lifecycle,
    next_version_status,
)
from ferryman_server.registry.validation import RegistryError, check_name, check_weights, parse_weights


def test_weights_must_sum_to_100() -> None:
    assert check_weights({"1": 90, "2": 10}) == [
        {"version": "1", "weight": 90},
        {"version": "2", "weight": 10},
    ]
    with pytest.raises(RegistryError, match="sum to 100, got 110"):
        check_weights({"1": 90, "2": 20})
    with pytest.raises(RegistryError, match=r"0\.\.100"):
        check_weights({"1": 150, "2": -50})
    with pytest.raises(RegistryError, match="at least one"):
        check_weights({})


def test_parse_weights() -> None:
    assert parse_weights(["1=90", "canary-2=10"]) == {"1": 90, "canary-2": 10}
    for bad in (["1"], ["1=x"], ["1=50", "1=50"]):
        with pytest.raises(RegistryError):
            parse_weights(bad)


def test_names() -> None:
    assert check_name("tenant", "acme-1") == "acme-1"
    for bad in ("", "Acme", "-x", "a" * 65, "a b", "a/b"):
        with pytest.raises(RegistryError, match="invalid tenant name"):
            check_name("tenant", bad)


def test_version_status_transitions() -> None:
    assert next_version_status(VersionStatus.REGISTERED, VersionStatus.ACTIVE) == VersionStatus.ACTIVE
    assert next_version_status(VersionStatus.ACTIVE, VersionStatus.DEPRECATED) == VersionStatus.DEPRECATED
    assert next_version_status(VersionStatus.DEPRECATED, VersionStatus.ACTIVE) == VersionStatus.ACTIVE
    with pytest.raises(InvalidTransition):
        next_version_status(VersionStatus.RETIRED, VersionStatus.ACTIVE)
    with pytest.raises(InvalidTransition):
        next_version_status(VersionStatus.REGISTERED, VersionStatus.DEPRECATED)


def test_node_lifecycle_transitions() -> None:
    assert next_node_lifecycle(NodeLifecycle.STARTING, NodeLifecycle.READY) == NodeLifecycle.READY
    assert next_node_lifecycle(NodeLifecycle.READY, NodeLifecycle.DRAINING) == NodeLifecycle.DRAINING
    assert next_node_lifecycle(NodeLifecycle.GONE, NodeLifecycle.STARTING) == NodeLifecycle.STARTING
    with pytest.raises(InvalidTransition):
        next_node_lifecycle(NodeLifecycle.DRAINING, NodeLifecycle.READY)
