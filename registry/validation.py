"""Pure checks of registry writes; each raises RegistryError with a one-line reason."""

from __future__ import annotations

import re
from collections.abc import Mapping

from ferryman_server.registry.states import ModelFormat, QuotaMode, StickyKey

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
VERSION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
TOTAL_WEIGHT = 100


class RegistryError(ValueError):
    """A write the registry refuses; the message is the one-line reason."""


class NotFound(RegistryError):
    """The write names something that does not exist."""


MAX_WEIGHT = 1000.0
"""Weights are relative: a range of 1:10^5 is more than any operator needs, and bounded
weights keep the fair-share arithmetic away from zero and infinity."""
MIN_WEIGHT = 0.01


def check_weight(weight: float) -> float:
    """A tenant's share weight: finite, between MIN_WEIGHT and MAX_WEIGHT."""
    if not MIN_WEIGHT <= weight <= MAX_WEIGHT:  # NaN fails too
        raise RegistryError(f"weight must be between {MIN_WEIGHT:g} and {MAX_WEIGHT:g}, got {weight!r}")
    return weight


def check_name(kind: str, name: str) -> str:
    """Tenant, model and node names: lowercase, digits, '.', '_', '-'; 1 to 64 chars."""
    if not NAME_RE.match(name):
        raise RegistryError(
            f"invalid {kind} name {name!r}: use 1-64 of a-z, 0-9, '.', '_', '-', starting alnum"
        )
    return name


def check_version(version: str) -> str:
    if not VERSION_RE.match(version):
        raise RegistryError(f"invalid version {version!r}: use 1-64 of A-Z, a-z, 0-9, '.', '_', '-'")
    return version


def check_weights(weights: Mapping[str, int]) -> list[dict[str, object]]:
    """Route targets from version -> weight: non-empty, 0..100 each, summing to 100."""
    if not weights:
        raise RegistryError("a route needs at least one VERSION=WEIGHT target")
    for version, weight in weights.items():
        check_version(version)
        if not 0 <= weight <= TOTAL_WEIGHT:
            raise RegistryError(f"weight of version {version!r} must be 0..100, got {weight}")
    total = sum(weights.values())
    if total != TOTAL_WEIGHT:
        raise RegistryError(f"route weights must sum to {TOTAL_WEIGHT}, got {total}")
    return [{"version": v, "weight": w} for v, w in weights.items()]


def parse_weights(pairs: list[str]) -> dict[str, int]:
    """``["1=90", "2=10"]`` -> ``{"1": 90, "2": 10}``."""
    weights: dict[str, int] = {}
    for pair in pairs:
        version, sep, weight = pair.partition("=")
        if not sep or not weight.strip().lstrip("-").isdigit():
            raise RegistryError(f"target {pair!r} is not VERSION=WEIGHT")
        if version in weights:
            raise RegistryError(f"version {version!r} named twice")
        weights[version] = int(weight)
    return weights


def check_sticky(sticky: str) -> StickyKey:
    try:
        return StickyKey(sticky)
    except ValueError:
        raise RegistryError(f"sticky must be one of {[k.value for k in StickyKey]}") from None


def check_format(fmt: str) -> ModelFormat:
    try:
        return ModelFormat(fmt)
    except ValueError:
        raise RegistryError(f"format must be one of {[f.value for f in ModelFormat]}") from None


def check_mode(mode: str) -> QuotaMode:
    try:
        return QuotaMode(mode)
    except ValueError:
        raise RegistryError(f"quota mode must be one of {[m.value for m in QuotaMode]}") from None


def check_limit(name: str, value: float | None) -> None:
    """Quota limits are positive when set (None = unlimited)."""
    if value is not None and value <= 0:
        raise RegistryError(f"{name} must be positive, got {value}")


def check_sha256(digest: str) -> str:
    if not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise RegistryError(f"sha256 must be 64 lowercase hex chars, got {digest!r}")
    return digest
