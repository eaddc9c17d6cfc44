"""The device check (``bench/gpu/check.py``, ``make gpu-check``): on this machine's CPU with
tiny shapes, so the script cannot rot where there is no GPU; on CUDA with SmolLM2's shape
(marked ``gpu``: deselected, with a line saying so, where there is no CUDA device)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.gpu import check


def run_check(tmp_path: Path, *args: str) -> dict[str, object]:
    out = tmp_path / "gpu-check.json"
    code = check.main([*args, "--out", str(out)])
    report = json.loads(out.read_text())
    failed = [c for c in report["checks"] if not c["passed"]]
    assert code == 0 and failed == [], failed
    return dict(report)


def test_the_device_check_passes_on_the_cpu_with_tiny_shapes(tmp_path: Path) -> None:
    report = run_check(tmp_path, "--device", "cpu", "--shapes", "tiny")
    assert len(report["checks"]) == 8  # type: ignore[arg-type]
    measures = report["measures"]
    assert isinstance(measures, dict) and set(measures) == {"streams", "mlp"}
    assert all(m["tokens_per_s"] > 0 for m in measures["streams"].values())


@pytest.mark.gpu
def test_the_device_check_passes_on_cuda(tmp_path: Path) -> None:
    report = run_check(tmp_path, "--device", "cuda", "--shapes", "full")
    assert report["gpu"]
