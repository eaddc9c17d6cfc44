"""Figures a test measured, printed on one line each so ``pytest -s | grep FIGURES`` collects
them for docs/benchmarks.md (the assertions, not these lines, decide pass or fail)."""

from __future__ import annotations

import json


def report(name: str, **figures: object) -> None:
    print(f"FIGURES {name}: {json.dumps(figures, sort_keys=True)}", flush=True)
