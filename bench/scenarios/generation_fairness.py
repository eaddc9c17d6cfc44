"""A light tenant's time to first token beside a noisy neighbour, on SmolLM2, one run:
the light tenant alone, then beside a heavy tenant sending ten times as many (and longer)
generations, with first-come-first-served admission (what vLLM and TGI do) and with
Ferryman's Virtual Token Counter admission (gpu_node/generation/scheduler.py).

Everything runs in this one process on one torch thread, the node's engine stepped in a
loop and arrivals checked between steps (seeded Poisson), so no load generator competes
for the cores. The heavy tenant asks for far more than the engine can do: its backlog
grows for the whole run, as a noisy neighbour's does.

    python -m bench.scenarios.generation_fairness [--seconds 40] [--slots 8] [--step-tokens 256]
        [--skip-fcfs]
"""

from __future__ import annotations

import argparse
import random
import time
from dataclasses import dataclass, field

import torch

from bench.scenarios.generation import MAX_LEN, STEP_TOKENS, TEXT, Clock
from bench.scenarios.measure import machine
from ferryman_server.cli.bench.stats import percentile
from ferryman_server.gpu_node.demo import smollm2
from ferryman_server.gpu_node.generation.engine import GenerationEngine
from ferryman_server.gpu_node.generation.llama import SlotLlama
from ferryman_server.gpu_node.generation.scheduler import Admission, Scheduler, Sequence, VirtualTokenCounter
from ferryman_server.kernel.config import default_data_dir

ACTIVE_S = 5.0
LIGHT = ("light", 0.5, (30, 60), 8)
"""(tenant, arrivals per second, prompt tokens, max_tokens)"""
HEAVY = ("heavy", 5.0, (30, 120), 64)


@dataclass
class Arrival:
    at: float
    tenant: str
    prompt: list[int]
    max_tokens: int
    first: float | None = None
    tokens: int = 0


@dataclass
class Outcome:
    arrivals: list[Arrival] = field(default_factory=list)
    seconds: float = 0.0
    """How long the run stepped (past the window while light requests still waited)."""

    def ttft_ms(self, tenant: str) -> list[float]:
        return [(a.first - a.at) * 1000 for a in self.arrivals if a.tenant == tenant and a.first is not None]


def arrivals(
    base: list[int], seconds: float, seed: int, tenants: list[tuple[str, float, tuple[int, int], int]]
) -> list[Arrival]:
    rng = random.Random(seed)
    out: list[Arrival] = []
    for tenant, rate, (low, high), max_tokens in tenants:
        at = rng.expovariate(rate)
        while at < seconds:
            length = rng.randint(low, high)
            offset = rng.randint(0, len(base) - length - 1)
            out.append(Arrival(at, tenant, base[offset : offset + length], max_tokens))
            at += rng.expovariate(rate)
    return sorted(out, key=lambda a: a.at)


def run(
    model: object,
    plan: list[Arrival],
    slots: int,
    admission: Admission,
    seconds: float,
    step_tokens: int = STEP_TOKENS,
) -> Outcome:
    """Step the engine until the window ends and every light request has its first token."""
    clock = Clock()
    scheduler = Scheduler(slots, step_tokens, VirtualTokenCounter(), admission, ACTIVE_S)
    engine = GenerationEngine(
        SlotLlama.of_model(model, slots, MAX_LEN), scheduler, MAX_LEN, stop_tokens=(), clock=clock.now
    )
    outcome = Outcome([Arrival(a.at, a.tenant, a.prompt, a.max_tokens) for a in plan])
    by_id = {str(i): a for i, a in enumerate(outcome.arrivals)}
    pending = list(by_id.items())
    light_left = sum(1 for a in outcome.arrivals if a.tenant == LIGHT[0])
    while clock.now() < seconds or light_left:
        if engine.idle and pending:
            clock.wait_until(pending[0][1].at)
        while pending and pending[0][1].at <= clock.now():
            key, arrival = pending.pop(0)
            engine.submit(
                Sequence(key, arrival.tenant, arrival.prompt, arrival.max_tokens),
            )
        if engine.idle and not pending:
            break
        for event in engine.step():
            arrival = by_id[event.seq_id]
            if event.token is not None:
                arrival.tokens += 1
                if arrival.first is None:
                    arrival.first = clock.now()
                    light_left -= arrival.tenant == LIGHT[0]
    outcome.seconds = clock.now()
    return outcome


def row(name: str, outcome: Outcome) -> str:
    light = outcome.ttft_ms(LIGHT[0])
    heavy_tokens = sum(a.tokens for a in outcome.arrivals if a.tenant == HEAVY[0])
    return (
        f"| {name} | {len(light)} | {percentile(light, 50):.0f} | {percentile(light, 99):.0f} "
        f"| {heavy_tokens / outcome.seconds:.1f} | {outcome.seconds:.0f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="arrival window")
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--step-tokens", type=int, default=STEP_TOKENS, help="the engine's per-step budget")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument(
        "--skip-fcfs", action="store_true", help="leave out FCFS (it drains the heavy backlog: minutes)"
    )
    opts = parser.parse_args()
    torch.set_num_threads(1)
    model, tokenizer = smollm2.load(smollm2.build_artifact(default_data_dir() / "models" / "smollm2"))
    base = tokenizer(TEXT * 20)["input_ids"]
    alone = arrivals(base, opts.seconds, opts.seed, [LIGHT])
    both = arrivals(base, opts.seconds, opts.seed, [LIGHT, HEAVY])
    print(
        f"\n{time.strftime('%Y-%m-%d')} · {machine()} · {opts.seconds:g} s of arrivals, {opts.slots} slots, "
        f"{opts.step_tokens}-token steps, "
        f"light {LIGHT[1]:g}/s x {LIGHT[3]} tokens, heavy {HEAVY[1]:g}/s x {HEAVY[3]} tokens, "
        "1 torch thread\n"
    )
    print("| run | light requests | light TTFT p50 ms | light TTFT p99 ms | heavy tokens/s | run s |")
    print("|---|---:|---:|---:|---:|---:|")
    print(
        row("light alone", run(model, alone, opts.slots, Admission.VTC, opts.seconds, opts.step_tokens)),
        flush=True,
    )
    for admission in (Admission.VTC,) if opts.skip_fcfs else (Admission.FCFS, Admission.VTC):
        outcome = run(model, both, opts.slots, admission, opts.seconds, opts.step_tokens)
        print(row(f"beside heavy, {admission.value.upper()}", outcome), flush=True)


if __name__ == "__main__":
    main()
