"""Continuous batching against what transformers gives, on SmolLM2-135M-Instruct, one run:

(a) ``generate()`` one request at a time, first come first served;
(b) static batching: ``generate()`` on left-padded batches of what has arrived (up to the
    same batch size), each batch running until its longest request is done;
(c) the node's engine (gpu_node/generation) with 1, 8 and 32 slots.

The same requests for each: prompts of 10-500 tokens, ``max_tokens`` drawn from a range,
arrivals spread over time (open loop, seeded), stop tokens ignored so every method
generates the same number of tokens. Everything runs in this one process on one torch
thread: no load generator competes for the cores (arrivals are timestamps checked between
steps). Tokens/s is generated tokens over the makespan; TTFT from arrival to first token;
TPOT the mean gap between a request's later tokens.

    python -m bench.scenarios.generation [--requests 24] [--rate 3] [--max-tokens 16 128]
        [--slots 1 8 32] [--skip-solo]
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch

from bench.scenarios.measure import machine
from ferryman_server.cli.bench.stats import percentile
from ferryman_server.gpu_node.demo import smollm2
from ferryman_server.gpu_node.generation.engine import GenerationEngine
from ferryman_server.gpu_node.generation.llama import SlotLlama
from ferryman_server.gpu_node.generation.scheduler import Scheduler, Sequence, VirtualTokenCounter
from ferryman_server.kernel.config import default_data_dir

PROMPT_TOKENS = (10, 500)
STEP_TOKENS = 256
MAX_LEN = 1024
TEXT = (
    "The river carried the ferry across at dawn, and the ferryman counted the passengers, "
    "their bags and their stories, as he had done for thirty years on the same cold water. "
)


@dataclass
class Request:
    arrival: float
    prompt: list[int]
    max_tokens: int
    token_times: list[float] = field(default_factory=list)


def workload(
    tokenizer: Any, count: int, rate: float, max_tokens: tuple[int, int], seed: int
) -> list[Request]:
    rng = random.Random(seed)
    base = tokenizer(TEXT * 40)["input_ids"]
    arrival, requests = 0.0, []
    for _ in range(count):
        length = rng.randint(*PROMPT_TOKENS)
        offset = rng.randint(0, len(base) - length - 1)
        requests.append(Request(arrival, base[offset : offset + length], rng.randint(*max_tokens)))
        arrival += rng.expovariate(rate)
    return requests


def fresh(requests: list[Request]) -> list[Request]:
    return [Request(r.arrival, r.prompt, r.max_tokens) for r in requests]


class Clock:
    def __init__(self) -> None:
        self.start = time.perf_counter()

    def now(self) -> float:
        return time.perf_counter() - self.start

    def wait_until(self, t: float) -> None:
        time.sleep(max(0.0, t - self.now()))


class Timestamps:
    """A stopping criterion that only records when each decoding step ended."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.times: list[float] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **_: Any) -> torch.Tensor:
        self.times.append(self.clock.now())
        return torch.zeros(input_ids.shape[0], dtype=torch.bool)


def run_generate(model: Any, batch: list[Request], clock: Clock, pad: int) -> None:
    """One ``generate()`` over ``batch`` (left-padded), until its longest request is done."""
    from transformers import StoppingCriteriaList

    width = max(len(r.prompt) for r in batch)
    ids = torch.tensor([[pad] * (width - len(r.prompt)) + r.prompt for r in batch])
    mask = torch.tensor([[0] * (width - len(r.prompt)) + [1] * len(r.prompt) for r in batch])
    stamps = Timestamps(clock)
    longest = max(r.max_tokens for r in batch)
    model.generate(
        ids,
        attention_mask=mask,
        max_new_tokens=longest,
        min_new_tokens=longest,
        do_sample=False,
        pad_token_id=pad,
        stopping_criteria=StoppingCriteriaList([stamps]),
    )
    for request in batch:
        request.token_times = stamps.times[: request.max_tokens]


def baseline(model: Any, requests: list[Request], *, batch_size: int, pad: int) -> float:
    """(a) with batch_size 1, (b) otherwise: take what has arrived, up to batch_size."""
    clock, pending = Clock(), list(requests)
    while pending:
        clock.wait_until(pending[0].arrival)
        batch = [r for r in pending if r.arrival <= clock.now()][:batch_size]
        pending = [r for r in pending if r not in batch]
        run_generate(model, batch, clock, pad)
    return clock.now()


def engine_run(model: Any, requests: list[Request], *, slots: int) -> float:
    """(c): submit each request at its arrival, step while anything runs."""
    clock = Clock()
    engine = GenerationEngine(
        SlotLlama.of_model(model, slots, MAX_LEN),
        Scheduler(slots, STEP_TOKENS, VirtualTokenCounter()),
        MAX_LEN,
        stop_tokens=(),
        clock=clock.now,
    )
    by_id = {str(i): r for i, r in enumerate(requests)}
    pending = list(by_id.items())
    while pending or not engine.idle:
        if engine.idle:
            clock.wait_until(pending[0][1].arrival)
        while pending and pending[0][1].arrival <= clock.now():
            key, request = pending.pop(0)
            engine.submit(Sequence(key, "bench", request.prompt, request.max_tokens))
        for event in engine.step():
            if event.token is not None:
                by_id[event.seq_id].token_times.append(clock.now())
    return clock.now()


def row(name: str, requests: list[Request], makespan: float) -> str:
    ttft = [(r.token_times[0] - r.arrival) * 1000 for r in requests]
    tpot = [
        (r.token_times[-1] - r.token_times[0]) / (len(r.token_times) - 1) * 1000
        for r in requests
        if len(r.token_times) > 1
    ]
    tokens = sum(len(r.token_times) for r in requests)
    return (
        f"| {name} | {tokens / makespan:.1f} | {percentile(ttft, 50):.0f} | {percentile(ttft, 99):.0f} "
        f"| {percentile(tpot, 50):.1f} | {percentile(tpot, 99):.1f} | {makespan:.1f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=24)
    parser.add_argument("--rate", type=float, default=3.0, help="arrivals per second (Poisson)")
    parser.add_argument("--max-tokens", type=int, nargs=2, default=(16, 128))
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--skip-solo", action="store_true", help="leave out (a), the slowest")
    parser.add_argument("--slots", type=int, nargs="+", default=[1, 8, 32], help="engine sizes to run")
    opts = parser.parse_args()
    torch.set_num_threads(1)
    model, tokenizer = smollm2.load(smollm2.build_artifact(default_data_dir() / "models" / "smollm2"))
    low, high = opts.max_tokens
    requests = workload(tokenizer, opts.requests, opts.rate, (low, high), opts.seed)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    runs: list[tuple[str, Callable[[list[Request]], float]]] = []
    if not opts.skip_solo:
        runs.append(("(a) generate(), one at a time", partial(baseline, model, batch_size=1, pad=pad)))
    for size in (8, 32):
        runs.append((f"(b) static batches of {size}", partial(baseline, model, batch_size=size, pad=pad)))
    for slots in opts.slots:
        runs.append((f"(c) engine, {slots} slots", partial(engine_run, model, slots=slots)))
    prompts = [len(r.prompt) for r in requests]
    print(
        f"\n{time.strftime('%Y-%m-%d')} · {machine()} · {opts.requests} requests, Poisson "
        f"{opts.rate:g}/s, prompts {min(prompts)}-{max(prompts)} tokens, max_tokens "
        f"{opts.max_tokens[0]}-{opts.max_tokens[1]}, 1 torch thread\n"
    )
    print("| method | tokens/s | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | TPOT p99 ms | makespan s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, run in runs:
        batch = fresh(requests)
        makespan = run(batch)
        print(row(name, batch, makespan), flush=True)


if __name__ == "__main__":
    main()
