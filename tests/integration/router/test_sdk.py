"""The SDK's contract against a real platform: streams, errors that name their request,
closed clients, zero timeouts, per-call metadata, and the async twins."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from router_platform import E2E

import ferryman
from ferryman.sdk.errors import ClientClosed, DeadlineExceeded, FerrymanError, InvalidInput, NotFound

RNG = np.random.default_rng(5)


def rows(n: int) -> list[np.ndarray]:
    return [RNG.standard_normal((1, 512), dtype=np.float32) for _ in range(n)]


def test_predict_many_answers_each_request_in_order_over_one_stream(e2e: E2E) -> None:
    inputs = rows(4)
    inputs.insert(2, np.zeros((1, 7), np.float32))  # the wrong width: only it fails
    with ferryman.Client(e2e.router, e2e.keys["acme"]) as client:
        answers = client.predict_many("mlp", inputs, user="bob")
        singles = [client.predict("mlp", x, user="bob") for x in inputs if x.shape[1] == 512]
    assert isinstance(answers[2], InvalidInput) and answers[2].request_id
    good = [a for a in answers if isinstance(a, ferryman.Prediction)]
    assert len(good) == 4
    for streamed, single in zip(good, singles, strict=True):
        streamed_out, single_out = streamed.outputs["output"], single.outputs["output"]
        assert isinstance(streamed_out, np.ndarray) and isinstance(single_out, np.ndarray)
        np.testing.assert_allclose(streamed_out, single_out, rtol=1e-4, atol=1e-5)  # batch-size numerics


def test_errors_name_their_request_id(e2e: E2E) -> None:
    with ferryman.Client(e2e.router, e2e.keys["acme"]) as client, pytest.raises(NotFound) as missing:
        client.predict("no-such-model", {"input": rows(1)[0]}, request_id="rid-404")
    assert missing.value.request_id == "rid-404" and "rid-404" in str(missing.value)


def test_timeout_zero_fails_at_once_and_negative_is_refused(e2e: E2E) -> None:
    with ferryman.Client(e2e.router, e2e.keys["acme"]) as client:
        client.predict("mlp", rows(1)[0])  # schema fetched: the next call is only Predict
        with pytest.raises(DeadlineExceeded):
            client.predict("mlp", rows(1)[0], timeout=0)
        with pytest.raises(ValueError, match="timeout"):
            client.predict("mlp", rows(1)[0], timeout=-1)


def test_a_closed_client_raises_a_typed_error(e2e: E2E) -> None:
    client = ferryman.Client(e2e.router, e2e.keys["acme"])
    client.close()
    with pytest.raises(ClientClosed):
        client.predict("mlp", rows(1)[0])
    with pytest.raises(ClientClosed):
        client.list_models()


def test_call_metadata_travels_with_the_call(e2e: E2E) -> None:
    # The router reads the first authorization entry, so a forged one after the key is
    # harmless here; that the SDK drops it anyway is a unit test (test_sdk.py).
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    with ferryman.Client(e2e.router, e2e.keys["acme"]) as client:
        answer = client.predict(
            "mlp",
            rows(1)[0],
            metadata=[("traceparent", traceparent), ("authorization", "Bearer fm_forged")],
        )
    assert answer.outputs["output"].shape == (1, 10)  # type: ignore[union-attr]


def test_async_client_lists_streams_and_closes(e2e: E2E) -> None:
    async def run() -> tuple[set[str], list[ferryman.Prediction | FerrymanError]]:
        async with ferryman.AsyncClient(e2e.router, e2e.keys["acme"]) as client:
            names = {m.name for m in await client.list_models()}
            answers = [a async for a in client.predict_many("mlp", rows(3))]
        with pytest.raises(ClientClosed):
            await client.predict("mlp", rows(1)[0])
        return names, answers

    names, answers = asyncio.run(run())
    assert "mlp" in names and "secret" not in names
    assert len(answers) == 3 and not any(isinstance(a, FerrymanError) for a in answers)
