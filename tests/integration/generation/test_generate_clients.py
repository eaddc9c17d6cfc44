"""The SDK's ``chat``/``generate`` (blocking and asyncio) and ``ferryman generate`` against
the generative platform."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from generation_platform import MODEL, GenPlatform

import ferryman

# Left out of make test-fast: the real model through real clients.
pytestmark = pytest.mark.slow

FRANCE = {"role": "user", "content": "What is the capital of France?"}
CLI_TIMEOUT_S = 120


def test_the_client_streams_a_chat_answer_with_its_usage(gen: GenPlatform) -> None:
    with ferryman.Client(gen.router, gen.tenant()) as client:
        chunks = list(client.chat(MODEL, [FRANCE], max_tokens=16))
    assert "Paris" in "".join(c.text for c in chunks)
    last = chunks[-1]
    assert last.finish_reason in ("stop", "length") and last.usage is not None
    assert last.usage.output_tokens == sum(len(c.token_ids) for c in chunks)
    assert all(c.finish_reason is None for c in chunks[:-1])


async def test_the_async_client_generates_and_stops_when_left(gen: GenPlatform) -> None:
    key = gen.tenant()
    async with ferryman.AsyncClient(gen.router, key) as client:
        seen = 0
        async for chunk in client.generate(MODEL, "Once upon a time", max_tokens=200):
            seen += len(chunk.token_ids)
            if seen >= 2:
                break
        # The same client serves the next generation at once: the left one freed its slot.
        chunks = [c async for c in client.chat(MODEL, [FRANCE], max_tokens=8, seed=7, temperature=0.7)]
    assert chunks[-1].usage is not None and 1 <= chunks[-1].usage.output_tokens <= 8


def test_unknown_models_raise_the_sdk_error(gen: GenPlatform) -> None:
    with ferryman.Client(gen.router, gen.tenant()) as client, pytest.raises(ferryman.NotFound):
        list(client.chat("no-such-model", [FRANCE]))
    with pytest.raises(ValueError, match="either a prompt or chat messages"):
        ferryman.sdk.generation.build_generate(MODEL, max_tokens=1)


def test_the_cli_prints_the_generation_as_json(gen: GenPlatform) -> None:
    env = {**os.environ, "FERRYMAN_TARGET": gen.router, "FERRYMAN_API_KEY": gen.tenant()}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ferryman_server.cli",
            "generate",
            MODEL,
            FRANCE["content"],
            "--max-tokens",
            "16",
            "--json",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=True,
    )
    assert done.stdout.strip(), done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert "Paris" in result["text"] and result["model"] == MODEL
    assert result["finish_reason"] in ("stop", "length") and result["usage"]["output_tokens"] >= 1
