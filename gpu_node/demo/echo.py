"""``echo``: a small test model for failure paths (format ``python``).

It doubles its input, and its artifact (a JSON file) sets what else it does:
``poison``: a value that makes the forward raise when any row contains it (a
poison input for failure isolation); ``delay_ms``: a sleep per batch (for drain
tests; a request parameter of the same name overrides it);
``oom_above_rows``: raise a device out-of-memory error for larger batches
(for the splitting path on machines without a GPU); ``fail_share``: the share of inputs
above ``fail_above`` it fails on, chosen by the input itself (a version that passes its
warm-up but fails on live inputs, for rollout tests: the batcher's bisection isolates the
rows and only their requests fail).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ferryman_server.gpu_node.handler import BatchInput, RuntimeOutput

WIDTH = 4
FAIL_SCALE = 7919.0
SCHEMA = {
    "inputs": [{"name": "input", "dtype": "FP32", "shape": [WIDTH]}],
    "outputs": [{"name": "output", "dtype": "FP32", "shape": [WIDTH]}],
}


def write_config(path: Path, **config: Any) -> Path:
    """Write an echo artifact with the given behaviour."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config, sort_keys=True))
    return path


def fails(first: torch.Tensor, share: float, above: float) -> torch.Tensor:
    """Rows (by their first value) a ``fail_share`` echo fails on: about ``share`` of any
    spread of values over ``above``, the same rows every time."""
    scaled = first * FAIL_SCALE
    return (first > above) & ((scaled - scaled.floor()) < share)


class EchoHandler:
    """``ferryman_server.gpu_node.demo.echo:EchoHandler``."""

    def load(self, path: Path, device: torch.device) -> None:
        config = json.loads(path.read_text())
        self._poison: float | None = config.get("poison")
        self._delay_s = float(config.get("delay_ms", 0)) / 1000
        self._oom_above: int | None = config.get("oom_above_rows")
        self._fail_share = float(config.get("fail_share", 0.0))
        self._fail_above = float(config.get("fail_above", 0.0))
        self.batch_sizes: list[int] = []
        self._device = device

    def predict(self, inputs: Mapping[str, BatchInput], parameters: Mapping[str, str]) -> RuntimeOutput:
        batch = inputs["input"]
        if not isinstance(batch, torch.Tensor):
            raise TypeError("echo takes a tensor")
        if self._oom_above is not None and batch.shape[0] > self._oom_above:
            raise torch.cuda.OutOfMemoryError(f"simulated: {batch.shape[0]} rows > {self._oom_above}")
        if self._poison is not None and bool((batch == self._poison).any()):
            raise ValueError(f"poison value {self._poison} in batch")
        if self._fail_share and bool(fails(batch[:, 0], self._fail_share, self._fail_above).any()):
            raise ValueError(f"this version fails {self._fail_share:.0%} of its inputs")
        delay_s = float(parameters["delay_ms"]) / 1000 if "delay_ms" in parameters else self._delay_s
        if delay_s:
            time.sleep(delay_s)
        self.batch_sizes.append(int(batch.shape[0]))
        return RuntimeOutput(outputs={"output": batch.to(self._device) * 2})
