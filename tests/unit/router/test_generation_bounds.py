"""The router's pure rules for a generation: what is bounded, the prompt's token bound, and
what makes two generations the same request."""

from __future__ import annotations

import math

from ferryman.v1 import common_pb2, inference_pb2
from ferryman_server.router.generation import (
    MARKER_TOKENS_PER_MESSAGE,
    MAX_MESSAGES,
    TEMPLATE_TOKENS,
    check_generate,
    fingerprint,
    prompt_bound,
)

MAX_TOKENS = 4096


def chat(**fields: object) -> inference_pb2.GenerateRequest:
    base: dict[str, object] = {
        "model": "m",
        "messages": [common_pb2.ChatMessage(role="user", content="hi")],
        "max_tokens": 8,
    }
    return inference_pb2.GenerateRequest(**{**base, **fields})  # type: ignore[arg-type]


def fields(request: inference_pb2.GenerateRequest) -> set[str]:
    return {field for field, _ in check_generate(request, MAX_TOKENS)}


def test_a_plain_chat_is_within_bounds() -> None:
    assert check_generate(chat(), MAX_TOKENS) == []


def test_each_hostile_field_is_named() -> None:
    assert fields(chat(max_tokens=MAX_TOKENS + 1)) == {"max_tokens"}
    assert fields(chat(messages=[common_pb2.ChatMessage(role="user", content="x")] * (MAX_MESSAGES + 1))) == {
        "messages"
    }
    assert fields(chat(stop=["", "x"])) == {"stop"}
    assert fields(chat(stop=["x" * 65])) == {"stop"}
    assert fields(chat(prompt="also")) == {"prompt"}
    assert fields(chat(request_id="r" * 129, user="u" * 129)) == {"request_id", "user"}


def test_nan_sampling_is_refused() -> None:
    """A NaN temperature would pass ``t < 0`` checks and fail the node's step for everyone."""
    for sampling in (
        common_pb2.SamplingParams(temperature=math.nan),
        common_pb2.SamplingParams(top_p=math.nan),
        common_pb2.SamplingParams(temperature=math.inf),
    ):
        assert fields(chat(sampling=sampling)) & {"sampling.temperature", "sampling.top_p"}


def test_the_prompt_bound_counts_every_byte_and_the_template() -> None:
    accented = "héllo"  # 6 bytes
    assert prompt_bound(inference_pb2.GenerateRequest(prompt=accented)) == 6 + MARKER_TOKENS_PER_MESSAGE
    two = [
        common_pb2.ChatMessage(role="system", content="be brief"),
        common_pb2.ChatMessage(role="user", content=accented),
    ]
    expected = TEMPLATE_TOKENS + (6 + 8 + MARKER_TOKENS_PER_MESSAGE) + (4 + 6 + MARKER_TOKENS_PER_MESSAGE)
    assert prompt_bound(chat(messages=two)) == expected


def test_the_fingerprint_ignores_the_id_and_deadline_only() -> None:
    first = chat(request_id="a")
    again = chat(request_id="b")
    again.timeout.seconds = 5
    assert fingerprint(first) == fingerprint(again)
    assert fingerprint(first) != fingerprint(chat(max_tokens=9))
    assert fingerprint(first) != fingerprint(chat(stop=["x"]))
