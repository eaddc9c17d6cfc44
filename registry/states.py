"""State machines of the registry: enums with their explicit transitions."""

from __future__ import annotations

from enum import StrEnum


class InvalidTransition(ValueError):
    """A state change that the state machine does not allow."""


class VersionStatus(StrEnum):
    """Lifecycle of a model version in the registry (not on a node)."""

    REGISTERED = "REGISTERED"  # known, not yet routable
    ACTIVE = "ACTIVE"  # may receive traffic
    DEPRECATED = "DEPRECATED"  # reachable by pin, no new route weight
    RETIRED = "RETIRED"  # gone; nodes unload it


_VERSION_TRANSITIONS: dict[VersionStatus, frozenset[VersionStatus]] = {
    VersionStatus.REGISTERED: frozenset({VersionStatus.ACTIVE, VersionStatus.RETIRED}),
    VersionStatus.ACTIVE: frozenset({VersionStatus.DEPRECATED, VersionStatus.RETIRED}),
    VersionStatus.DEPRECATED: frozenset({VersionStatus.ACTIVE, VersionStatus.RETIRED}),
    VersionStatus.RETIRED: frozenset(),
}


def next_version_status(current: VersionStatus, target: VersionStatus) -> VersionStatus:
    """Return ``target`` if the version may move there from ``current``."""
    if target == current:
        return current
    if target not in _VERSION_TRANSITIONS[current]:
        raise InvalidTransition(f"version status {current} cannot become {target}")
    return target


class NodeLifecycle(StrEnum):
    """Lifecycle of a node process as it reports itself."""

    STARTING = "STARTING"  # registered, loading its placements
    READY = "READY"  # serving batches
    DRAINING = "DRAINING"  # finishing in-flight work, takes no new batches
    GONE = "GONE"  # deregistered or heartbeat expired


_NODE_TRANSITIONS: dict[NodeLifecycle, frozenset[NodeLifecycle]] = {
    NodeLifecycle.STARTING: frozenset({NodeLifecycle.READY, NodeLifecycle.DRAINING, NodeLifecycle.GONE}),
    NodeLifecycle.READY: frozenset({NodeLifecycle.DRAINING, NodeLifecycle.GONE}),
    NodeLifecycle.DRAINING: frozenset({NodeLifecycle.GONE}),
    # A node that restarts under the same name registers afresh.
    NodeLifecycle.GONE: frozenset({NodeLifecycle.STARTING}),
}


def next_node_lifecycle(current: NodeLifecycle, target: NodeLifecycle) -> NodeLifecycle:
    """Return ``target`` if a node may move there from ``current``."""
    if target == current:
        return current
    if target not in _NODE_TRANSITIONS[current]:
        raise InvalidTransition(f"node lifecycle {current} cannot become {target}")
    return target


class RolloutState(StrEnum):
    """Lifecycle of a progressive rollout."""

    WARMING = "WARMING"  # the candidate has no weight until every node placed it is warm
    RUNNING = "RUNNING"  # a weight step under analysis
    PAUSED = "PAUSED"  # weights held; an operator or a lost node stopped it
    PROMOTED = "PROMOTED"  # the candidate took all traffic
    ROLLED_BACK = "ROLLED_BACK"  # the analysis failed: all traffic back on the baseline
    ABORTED = "ABORTED"  # an operator ended it: all traffic back on the baseline


_ROLLOUT_TRANSITIONS: dict[RolloutState, frozenset[RolloutState]] = {
    RolloutState.WARMING: frozenset({RolloutState.RUNNING, RolloutState.PAUSED, RolloutState.ABORTED}),
    RolloutState.RUNNING: frozenset(
        {
            RolloutState.RUNNING,  # the next step
            RolloutState.PAUSED,
            RolloutState.PROMOTED,
            RolloutState.ROLLED_BACK,
            RolloutState.ABORTED,
        }
    ),
    # Resuming warms again: nodes may have changed while it was paused.
    RolloutState.PAUSED: frozenset({RolloutState.WARMING, RolloutState.ABORTED}),
    RolloutState.PROMOTED: frozenset(),
    RolloutState.ROLLED_BACK: frozenset(),
    RolloutState.ABORTED: frozenset(),
}

ROLLOUT_FINISHED = frozenset({RolloutState.PROMOTED, RolloutState.ROLLED_BACK, RolloutState.ABORTED})


def next_rollout_state(current: RolloutState, target: RolloutState) -> RolloutState:
    """Return ``target`` if a rollout may move there from ``current``."""
    if target not in _ROLLOUT_TRANSITIONS[current]:
        raise InvalidTransition(f"a {current} rollout cannot become {target}")
    return target


class QuotaMode(StrEnum):
    """What happens past a limit."""

    HARD = "hard"  # reject with RESOURCE_EXHAUSTED
    SOFT = "soft"  # admit, but degrade (fallback model or lower priority)


class StickyKey(StrEnum):
    """What keeps a caller on one version of a weighted route."""

    NONE = "none"
    TENANT = "tenant"
    USER = "user"


class ModelFormat(StrEnum):
    """How a version's artifact is loaded on a node."""

    TORCH_EXPORT = "torch_export"
    TORCHSCRIPT = "torchscript"
    PYTHON = "python"
    CAUSAL_LM = "causal_lm"
    """A generative model (gpu_node/generation): served by Node.Generate, not InferBatch."""
