"""90% duplicate inputs on ``mlp``: coalescing on vs off (closed loop, concurrency 16 and 64).

Nine requests in ten carry one of a few hot inputs, the tenth a unique one; the result cache
is off, so only in-flight coalescing can save work. Prints throughput, latency and CPU per
request for both settings, and writes JSON.

    python -m bench.scenarios.duplicates [--levels 16,64] [--out docs/bench]
"""

from __future__ import annotations

import numpy as np

from bench.scenarios.measure import Point, closed_sweep, scenario_options, table, write_json
from bench.scenarios.platform import PlatformSpec, ferryman
from ferryman.tensors import encode
from ferryman.v1 import common_pb2
from ferryman_server.cli.bench.loadgen import InputsFactory
from ferryman_server.gpu_node.demo.mlp import IN_FEATURES

DUPLICATE_SHARE = 0.9
HOT_INPUTS = 4


def duplicate_inputs(share: float = DUPLICATE_SHARE, hot: int = HOT_INPUTS) -> InputsFactory:
    """Request n gets one of ``hot`` fixed inputs, except every ``1/(1-share)``-th: unique."""
    rng = np.random.default_rng(0)
    hot_tensors = [encode(rng.standard_normal((1, IN_FEATURES), dtype=np.float32)) for _ in range(hot)]
    every = round(1 / (1 - share))

    def make(n: int) -> list[common_pb2.NamedTensor]:
        if n % every == 0:
            x = rng.standard_normal((1, IN_FEATURES), dtype=np.float32)
            return [common_pb2.NamedTensor(name="input", tensor=encode(x))]
        return [common_pb2.NamedTensor(name="input", tensor=hot_tensors[n % hot])]

    return make


def main() -> None:
    opts, levels = scenario_options(__doc__, "16,64")
    points: list[Point] = []
    for coalesce in (True, False):
        spec = PlatformSpec(env={"FERRYMAN_BATCHER_COALESCE": str(coalesce).lower()})
        with ferryman(spec) as platform:
            system = f"coalescing {'on' if coalesce else 'off'}"
            points += closed_sweep(system, platform, "mlp", levels, duplicate_inputs(), opts)
    print()
    print(table(points))
    write_json(opts.out / "duplicates.json", "duplicates", points)


if __name__ == "__main__":
    main()
