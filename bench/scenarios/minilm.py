"""``minilm`` (all-MiniLM-L6-v2 sentence embeddings) at concurrency 1, 8 and 32.

A transformer gains far less from batching than the MLP (shared/BASELINES.md), so this shows
what the scheduler does when waiting buys little. Unique sentences, closed loop; JSON out.

    python -m bench.scenarios.minilm [--levels 1,8,32] [--out docs/bench]
"""

from __future__ import annotations

from bench.scenarios.measure import closed_sweep, scenario_options, table, write_json
from bench.scenarios.platform import PlatformSpec, ferryman
from ferryman.v1 import common_pb2
from ferryman_server.cli.bench.loadgen import InputsFactory

WORDS = [
    "ferry",
    "river",
    "crossing",
    "night",
    "lantern",
    "oar",
    "current",
    "bank",
    "toll",
    "passenger",
    "fog",
]
SENTENCE_WORDS = 12


def sentences() -> InputsFactory:
    """A different sentence for every request (nothing coalesces)."""

    def make(n: int) -> list[common_pb2.NamedTensor]:
        words = [WORDS[(n * 7 + i * (n % 5 + 1)) % len(WORDS)] for i in range(SENTENCE_WORDS)]
        text = f"{n}: " + " ".join(words)
        return [common_pb2.NamedTensor(name="text", text=common_pb2.TextList(values=[text]))]

    return make


def main() -> None:
    opts, levels = scenario_options(__doc__, "1,8,32")
    spec = PlatformSpec(models=("minilm",))
    with ferryman(spec) as platform:
        points = closed_sweep("ferryman", platform, "minilm", levels, sentences(), opts)
    print()
    print(table(points))
    write_json(opts.out / "minilm.json", "minilm", points)


if __name__ == "__main__":
    main()
