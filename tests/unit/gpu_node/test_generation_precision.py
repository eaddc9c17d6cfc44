"""A causal LM's projections fit the device: float16 on a CPU is FBGEMM's packed GEMM where
the torch build has FBGEMM, and float32 where it does not (an aarch64 build), never a
failure to load."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from ferryman_server.gpu_node.generation import llama


def test_float16_on_a_cpu_without_fbgemm_holds_float32(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(llama, "fbgemm_fp16", lambda: False)
    weight, x = torch.randn(16, 8), torch.randn(3, 8)
    projection = llama.Projection(weight, torch.float16, torch.device("cpu"))
    torch.testing.assert_close(projection(x), F.linear(x, weight), rtol=0, atol=0)


@pytest.mark.skipif(not llama.fbgemm_fp16(), reason="this torch build has no FBGEMM")
def test_float16_on_a_cpu_with_fbgemm_reads_half_precision_weights() -> None:
    weight, x = torch.randn(16, 8), torch.randn(3, 8)
    projection = llama.Projection(weight, torch.float16, torch.device("cpu"))
    expected = F.linear(x, weight.half().float())
    torch.testing.assert_close(projection(x), expected, rtol=1e-3, atol=1e-3)
