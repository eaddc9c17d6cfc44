"""The configuration reference is generated from the settings models and committed fresh;
every field is documented; fields that must agree are checked together."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from layers import REPO, ROOMS
from pydantic import ValidationError
from pydantic_settings import BaseSettings

from ferryman_server.batcher.settings import BatcherSettings
from ferryman_server.cli.configuration import MODELS, REFERENCE, render
from ferryman_server.gpu_node.settings import NodeSettings
from ferryman_server.kernel.config import CommonSettings
from ferryman_server.quota.settings import QuotaSettings
from ferryman_server.rollouts.settings import RolloutSettings
from ferryman_server.router.settings import RouterSettings


def settings_classes() -> set[str]:
    """Every class in the rooms that derives from BaseSettings, by name."""
    found = set()
    for room in ROOMS:
        for path in (REPO / room).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef) and any(
                    isinstance(b, ast.Name) and b.id == "BaseSettings" for b in node.bases
                ):
                    found.add(node.name)
    return found


def test_the_reference_lists_every_settings_model() -> None:
    assert {m.__name__ for _, m in MODELS} == settings_classes()


@pytest.mark.parametrize("model", [m for _, m in MODELS], ids=lambda m: m.__name__)
def test_every_field_is_documented(model: type[BaseSettings]) -> None:
    assert [n for n, f in model.model_fields.items() if not (f.description or "").strip()] == []


def test_the_committed_reference_is_fresh() -> None:
    assert REFERENCE.read_text() == render(), "docs/configuration.md is stale: run `make docs`"


def test_the_reference_names_no_machine() -> None:
    assert str(Path.home()) not in render()


@pytest.mark.parametrize(
    ("model", "values", "names"),
    [
        (CommonSettings, {"tls_cert": "c.pem"}, "FERRYMAN_TLS_KEY"),
        (CommonSettings, {"tls_client_auth": True}, "FERRYMAN_TLS_CA"),
        (CommonSettings, {"keepalive_s": 5, "keepalive_timeout_s": 5}, "FERRYMAN_KEEPALIVE_S"),
        (CommonSettings, {"heartbeat_timeout_s": 0.5}, "FERRYMAN_REGISTRY_REFRESH_S"),
        (RouterSettings, {"limit_initial": 8}, "FERRYMAN_ROUTER_LIMIT_INITIAL"),
        (RouterSettings, {"job_window_s": 10, "job_max_window_s": 5}, "FERRYMAN_ROUTER_JOB_MAX_WINDOW_S"),
        (QuotaSettings, {"backend": "redis"}, "FERRYMAN_QUOTA_REDIS_URL"),
        (RolloutSettings, {"forecast_pools": {"gpu": "sum(x)"}}, "FERRYMAN_ROLLOUT_PROMETHEUS_URL"),
        (BatcherSettings, {"max_queue_rows": 10, "max_total_rows": 5}, "FERRYMAN_BATCHER_MAX_TOTAL_ROWS"),
        (BatcherSettings, {"retry_after_min_s": 2, "retry_after_max_s": 1}, "RETRY_AFTER_MAX_S"),
        (BatcherSettings, {"load_on_demand": False, "hold_for_node": True}, "LOAD_ON_DEMAND"),
        (BatcherSettings, {"load_on_demand": False, "scale_out_after_s": 5}, "LOAD_ON_DEMAND"),
        (NodeSettings, {"generation_slots": 8, "generation_step_tokens": 8}, "GENERATION_SLOTS"),
    ],
)
def test_fields_that_must_agree_are_checked_together(
    model: type[BaseSettings], values: dict[str, object], names: str
) -> None:
    with pytest.raises(ValidationError, match=names):
        model.model_validate(values)
    assert model()  # the defaults agree
