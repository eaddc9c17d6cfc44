"""Prefix caching on a multi-turn chat workload, SmolLM2-135M-Instruct, the node's engine with
the cache on and off, one run each.

Several conversations of one tenant share a long system prompt; each turn sends the whole
conversation so far (system prompt, every question and answer) and a new question, as a chat
client does. The turns of all conversations interleave: each conversation's next turn
arrives once its last answer is done. Everything runs in this process on one torch thread
(the node's engine, no sockets), so the two runs differ only by the cache. Reported: time
to first token per turn (p50, p99, and for the first turn apart), tokens per second over the
run, and the prompt tokens the cache saved.

    python -m bench.scenarios.prefix_cache [--conversations 4] [--turns 4] [--system-words 300]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from bench.scenarios.measure import machine
from ferryman_server.cli.bench.stats import percentile
from ferryman_server.gpu_node.demo import smollm2
from ferryman_server.gpu_node.generation.engine import GenerationEngine
from ferryman_server.gpu_node.generation.llama import SlotLlama
from ferryman_server.gpu_node.generation.scheduler import Scheduler, Sequence, VirtualTokenCounter
from ferryman_server.gpu_node.generation.tokenizer import ChatTokenizer
from ferryman_server.kernel.config import default_data_dir

SLOTS = 8
MAX_LEN = 2048
STEP_TOKENS = 256
ANSWER_TOKENS = 24
QUESTIONS = [
    "Which river runs through the city?",
    "How long does the crossing take?",
    "What does a ticket cost?",
    "Is there a ferry at night?",
    "Can I take a bicycle on board?",
    "Where do I buy tickets?",
]


@dataclass
class Conversation:
    name: str
    turns: list[dict[str, str]]
    asked: int = 0
    ttft: list[float] = field(default_factory=list)


def system_prompt(words: int) -> str:
    """A long, fixed system prompt (a policy document, as assistants carry)."""
    rule = "Answer politely, briefly and truthfully about ferries, tickets, timetables and safety."
    text = " ".join(rule.split() * (words // len(rule.split()) + 1))
    return " ".join(text.split()[:words])


def run(model: SlotLlama, tokenizer: ChatTokenizer, opts: argparse.Namespace, cache: bool) -> dict[str, Any]:
    scheduler = Scheduler(SLOTS, STEP_TOKENS, VirtualTokenCounter(), prefix_cache=cache)
    # Stop tokens ignored: both runs generate the same number of tokens.
    engine = GenerationEngine(model, scheduler, MAX_LEN, stop_tokens=())
    system = {"role": "system", "content": system_prompt(opts.system_words)}
    chats = [Conversation(f"c{i}", [system]) for i in range(opts.conversations)]
    live: dict[str, tuple[Conversation, float, list[int]]] = {}
    generated = 0
    first_turn: list[float] = []
    later_turns: list[float] = []

    def ask(chat: Conversation) -> None:
        question = QUESTIONS[(chat.asked + int(chat.name[1:])) % len(QUESTIONS)]
        chat.turns.append({"role": "user", "content": question})
        prompt = tokenizer.chat_ids(chat.turns)
        seq_id = f"{chat.name}-{chat.asked}"
        engine.submit(Sequence(seq_id, "acme", prompt, ANSWER_TOKENS))
        live[seq_id] = (chat, time.perf_counter(), [])
        chat.asked += 1

    started = time.perf_counter()
    for chat in chats:
        ask(chat)
    while live:
        for event in engine.step():
            chat, at, tokens = live[event.seq_id]
            if event.token is not None:
                if not tokens:
                    (first_turn if chat.asked == 1 else later_turns).append(time.perf_counter() - at)
                tokens.append(event.token)
                generated += 1
            if event.finish is not None:
                del live[event.seq_id]
                answer = tokenizer.decode(tokens, skip_special_tokens=True)
                chat.turns.append({"role": "assistant", "content": answer})
                if chat.asked < opts.turns:
                    ask(chat)
    elapsed = time.perf_counter() - started
    return {
        "cache": cache,
        "first_turn_ttft_p50_ms": percentile(first_turn, 50) * 1000,
        "later_ttft_p50_ms": percentile(later_turns, 50) * 1000,
        "later_ttft_p99_ms": percentile(later_turns, 99) * 1000,
        "tokens_per_s": generated / elapsed,
        "reused_tokens": scheduler.prefix.reused_tokens,
        "prefill_forwards": engine.prefill_forwards,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--conversations", type=int, default=4)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--system-words", type=int, default=300)
    opts = parser.parse_args()
    torch.set_num_threads(1)
    artifact = smollm2.build_artifact(default_data_dir() / "models" / "smollm2")
    tokenizer = ChatTokenizer(artifact)
    model = SlotLlama.from_checkpoint(artifact, smollm2.WEIGHTS, SLOTS, MAX_LEN)
    print(f"machine: {machine()}; {opts.conversations} conversations x {opts.turns} turns, one thread")
    rows = [run(model, tokenizer, opts, cache) for cache in (False, True)]
    print("| prefix cache | first turn TTFT p50 | later turns TTFT p50 / p99 | tokens/s | tokens reused |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {'on' if r['cache'] else 'off'} | {r['first_turn_ttft_p50_ms']:.0f} ms "
            f"| {r['later_ttft_p50_ms']:.0f} / {r['later_ttft_p99_ms']:.0f} ms | {r['tokens_per_s']:.1f} "
            f"| {r['reused_tokens']:,} |"
        )


if __name__ == "__main__":
    main()
