"""What a decode step's GEMMs cost on this CPU in each precision torch offers: 30 layers of
SmolLM2-135M's projection shapes (q/k/v stacked, o, gate/up stacked, down), distinct random
weights per layer so nothing stays in cache, one torch thread, batch 1 and 8.

The evidence behind ``gpu_node/generation/llama.py``'s choice of FBGEMM's float16 (docs/benchmarks.md).

    python -m bench.scenarios.gemm_precisions [--repeats 20]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
from torch.nn import functional as F

LAYERS = 30
SHAPES = [(576, 960), (576, 576), (576, 3072), (1536, 576)]
"""(in, out) of each projection of a SmolLM2-135M layer, as the engine stacks them."""
WEIGHT_SCALE = 0.05
INT8_MAX = 127
WARM_UP = 3

Linear = Callable[[torch.Tensor], torch.Tensor]


def dense(weight: torch.Tensor, dtype: torch.dtype) -> Linear:
    held = weight.to(dtype)
    return lambda x: F.linear(x.to(dtype), held)


def fbgemm_int8(weight: torch.Tensor) -> Linear:
    scales = (weight.abs().amax(1) / INT8_MAX).double()
    zeros = torch.zeros(weight.shape[0], dtype=torch.long)
    packed = torch.ops.quantized.linear_prepack(
        torch.quantize_per_channel(weight, scales, zeros, 0, torch.qint8), None
    )
    return lambda x: torch.ops.quantized.linear_dynamic(x, packed, True)


def fbgemm_fp16(weight: torch.Tensor) -> Linear:
    packed = torch.ops.quantized.linear_prepack_fp16(weight, None)
    return lambda x: torch.ops.quantized.linear_dynamic_fp16(x, packed)


def weight_int8pack(weight: torch.Tensor) -> Linear:
    scales = weight.abs().amax(1) / INT8_MAX
    quantized = (weight / scales[:, None]).round().to(torch.int8)
    return lambda x: torch._weight_int8pack_mm(x, quantized, scales)


KINDS: dict[str, Callable[[torch.Tensor], Linear]] = {
    "float32": lambda w: dense(w, torch.float32),
    "bfloat16": lambda w: dense(w, torch.bfloat16),
    "fbgemm fp16": fbgemm_fp16,
    "fbgemm dynamic int8": fbgemm_int8,
    "_weight_int8pack_mm": weight_int8pack,
}


def step_ms(linears: list[tuple[Linear, int]], batch: int, repeats: int) -> float:
    inputs = {width: torch.randn(batch, width) for width in {w for _, w in linears}}
    for _ in range(WARM_UP):
        for linear, width in linears:
            linear(inputs[width])
    start = time.perf_counter()
    for _ in range(repeats):
        for linear, width in linears:
            linear(inputs[width])
    return (time.perf_counter() - start) / repeats * 1000


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=20)
    opts = parser.parse_args()
    torch.set_num_threads(1)
    weights = [
        (torch.randn(out, width) * WEIGHT_SCALE, width) for _ in range(LAYERS) for width, out in SHAPES
    ]
    print("| precision | batch 1 ms | batch 8 ms |\n|---|---:|---:|")
    with torch.inference_mode():
        for name, make in KINDS.items():
            linears = [(make(w), width) for w, width in weights]
            one, eight = (step_ms(linears, batch, opts.repeats) for batch in (1, 8))
            print(f"| {name} | {one:.1f} | {eight:.1f} |", flush=True)


if __name__ == "__main__":
    main()
