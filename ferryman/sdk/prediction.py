"""What a prediction returns: outputs by name, the version that served it, usage, timing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ferryman.sdk.convert import Output, from_outputs
from ferryman.v1 import inference_pb2


@dataclass(frozen=True)
class Usage:
    items: int
    input_tokens: int
    output_tokens: int
    cost_usd: float


@dataclass(frozen=True)
class Timing:
    queue_ms: float
    compute_ms: float
    total_ms: float
    batch_size: int


@dataclass(frozen=True)
class Prediction:
    """A model's answer: outputs by name, and which version served it."""

    request_id: str
    model: str
    version: str
    fallback: bool
    outputs: dict[str, Output]
    usage: Usage
    timing: Timing
    coalesced: bool
    cached: bool

    @classmethod
    def from_proto(cls, response: inference_pb2.PredictResponse) -> Prediction:
        def ms(d: Any) -> float:
            return float(d.ToNanoseconds()) / 1e6

        return cls(
            request_id=response.request_id,
            model=response.model,
            version=response.version,
            fallback=response.fallback,
            outputs=from_outputs(response.outputs),
            usage=Usage(
                response.usage.items,
                response.usage.input_tokens,
                response.usage.output_tokens,
                response.usage.cost_usd,
            ),
            timing=Timing(
                ms(response.timing.queue),
                ms(response.timing.compute),
                ms(response.timing.total),
                response.timing.batch_size,
            ),
            coalesced=response.coalesced,
            cached=response.cached,
        )
