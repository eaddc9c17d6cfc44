"""Runtime for ``causal_lm`` artifacts: a causal-LM version on a node, its tokenizer and chat
template, the slot cache and engine sized by the node's settings, the driver that steps them,
and the text of each generation streamed as it decodes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ferryman.v1 import common_pb2, node_pb2
from ferryman_server.gpu_node.demo import smollm2
from ferryman_server.gpu_node.generation.driver import GenerationDriver
from ferryman_server.gpu_node.generation.engine import Constraint, GenerationEngine
from ferryman_server.gpu_node.generation.limits import StopText, completion_limit
from ferryman_server.gpu_node.generation.llama import PRECISIONS, SlotLlama
from ferryman_server.gpu_node.generation.sampler import Sampling
from ferryman_server.gpu_node.generation.scheduler import (
    Admission,
    FinishReason,
    Scheduler,
    Sequence,
    VirtualTokenCounter,
)
from ferryman_server.gpu_node.generation.structured import StructuredOutputs
from ferryman_server.gpu_node.generation.tokenizer import ChatTokenizer
from ferryman_server.gpu_node.metrics import NodeMetrics

REPLACEMENT = "\ufffd"
"""What a tokenizer decodes half a multi-byte character to: held back until complete."""

FINISH_TO_PROTO: dict[FinishReason, common_pb2.FinishReason] = {
    FinishReason.STOP: common_pb2.FINISH_REASON_STOP,
    FinishReason.LENGTH: common_pb2.FINISH_REASON_LENGTH,
    FinishReason.CANCELLED: common_pb2.FINISH_REASON_CANCELLED,
    FinishReason.QUOTA: common_pb2.FINISH_REASON_QUOTA,
    FinishReason.DEADLINE: common_pb2.FINISH_REASON_DEADLINE,
    FinishReason.ERROR: common_pb2.FINISH_REASON_ERROR,
}


@dataclass(frozen=True)
class EngineLimits:
    """The engine's size on this node (NodeSettings' generation_* fields)."""

    slots: int
    max_len: int
    step_tokens: int
    admission: Admission = Admission.VTC
    active_s: float = 0.0
    precision: str = "float16"
    """A key of ``ferryman_server.gpu_node.generation.llama.PRECISIONS``."""
    prefix_cache: bool = False
    """Reuse a tenant's cached prompt prefixes (``ferryman_server.gpu_node.generation.prefix``)."""


@dataclass
class LoadedLM:
    """What a causal-LM slot holds once loaded (before its driver starts on the loop)."""

    tokenizer: ChatTokenizer
    engine: GenerationEngine
    slots: int
    model: SlotLlama


def load_causal_lm(path: Path, limits: EngineLimits, device: torch.device | None = None) -> LoadedLM:
    """Load the artifact and size its engine (in a worker thread: it takes seconds)."""
    tokenizer = ChatTokenizer(path)
    stop = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    model = SlotLlama.from_checkpoint(
        path, smollm2.WEIGHTS, limits.slots, limits.max_len, PRECISIONS[limits.precision], device
    )
    engine = GenerationEngine(
        model,
        Scheduler(
            limits.slots,
            limits.step_tokens,
            VirtualTokenCounter(),
            limits.admission,
            limits.active_s,
            limits.prefix_cache,
        ),
        limits.max_len,
        stop,
    )
    # Warm up: one short generation, so the first tenant does not pay for lazy init.
    engine.submit(Sequence("warm-up", "", tokenizer.encode("Ferryman"), max_tokens=2))
    while not engine.idle:
        engine.step()
    return LoadedLM(tokenizer, engine, limits.slots, model)


def sampling_of(params: common_pb2.SamplingParams) -> Sampling:
    return Sampling(
        temperature=params.temperature,
        top_p=params.top_p or 1.0,
        top_k=params.top_k,
        seed=params.seed if params.HasField("seed") else None,
    )


class IncrementalText:
    """Text deltas of a growing token list, decoding only a short window each token (as
    TGI does): the tokens since the last emitted text, with a few before them as context
    (a token's text can depend on its neighbour, e.g. a leading space)."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self._tokens: list[int] = []
        self._prefix = 0
        """Start of the window: tokens before it are never decoded again."""
        self._read = 0
        """Tokens up to here have had their text emitted."""

    def _decode(self, tokens: list[int]) -> str:
        text: str = self._tokenizer.decode(tokens, skip_special_tokens=True)
        return text

    def add(self, token: int) -> str:
        """The text ``token`` completes ("" while a character is still split)."""
        self._tokens.append(token)
        emitted = self._decode(self._tokens[self._prefix : self._read])
        window = self._decode(self._tokens[self._prefix :])
        if len(window) <= len(emitted) or window.endswith(REPLACEMENT):
            return ""
        self._prefix, self._read = self._read, len(self._tokens)
        return window[len(emitted) :]


class CausalLM:
    """Generations of one loaded version, on the event loop."""

    def __init__(
        self, loaded: LoadedLM, loop: asyncio.AbstractEventLoop, metrics: NodeMetrics, labels: dict[str, str]
    ) -> None:
        self.tokenizer = loaded.tokenizer
        self.structured = StructuredOutputs(loaded.tokenizer)
        self._metrics, self._labels = metrics, labels
        running = metrics.sequences.labels(**labels, state="running")
        waiting = metrics.sequences.labels(**labels, state="waiting")
        preempted = metrics.preemptions.labels(**labels)
        hits, reused = metrics.prefix_hits.labels(**labels), metrics.prefix_tokens.labels(**labels)
        scheduler = loaded.engine.scheduler
        counted = [0, 0, 0]

        def gauges(now_running: int, now_waiting: int) -> None:
            """After each step, on the engine's worker (the only one touching the scheduler)."""
            running.set(now_running)
            waiting.set(now_waiting)
            if scheduler.preemptions > counted[0]:
                preempted.inc(scheduler.preemptions - counted[0])
                counted[0] = scheduler.preemptions
            prefix = scheduler.prefix
            if prefix.hits > counted[1]:
                hits.inc(prefix.hits - counted[1])
                reused.inc(prefix.reused_tokens - counted[2])
                counted[1], counted[2] = prefix.hits, prefix.reused_tokens

        metrics.slots.labels(**labels).set(loaded.slots)
        self._context = loaded.engine.context
        self._model = loaded.model
        self.driver = GenerationDriver(loaded.engine, loop, gauges)

    def prompt_ids(self, request: node_pb2.NodeGenerateRequest) -> list[int]:
        """The prompt's token ids: chat messages through the chat template, or the raw prompt."""
        if request.messages:
            messages = [{"role": m.role, "content": m.content} for m in request.messages]
            return self.tokenizer.chat_ids(messages, add_generation_prompt=True)
        return self.tokenizer.encode(request.prompt)

    @property
    def cache_bytes(self) -> int:
        """The KV cache this model reserved: every slot's keys and values, full length."""
        return self._model.shape.bytes

    def add_adapter(self, path: Path) -> int:
        """Load a LoRA adapter over this model (off the event loop); its id for ``generate``."""
        return self._model.add_adapter(path)

    def remove_adapter(self, adapter: int) -> None:
        """Unload a LoRA adapter: its running generations end (CANCELLED) first, on the
        engine's worker, so no step meets its factors gone."""
        self.driver.retire_adapter(adapter, lambda: self._model.remove_adapter(adapter))

    def prepare(self, request: node_pb2.NodeGenerateRequest) -> tuple[list[int], Constraint | None]:
        """The prompt's token ids and the output's constraint (JSON mode, a schema), off the
        event loop: the chat template and a grammar's compilation take milliseconds. A schema
        that cannot be compiled is a ValueError."""
        return self.prompt_ids(request), self.structured.constraint(request.sampling)

    async def generate(
        self,
        request: node_pb2.NodeGenerateRequest,
        prompt: list[int],
        start_by: float,
        constraint: Constraint | None = None,
        adapter: int = 0,
    ) -> AsyncGenerator[node_pb2.GenerateEvent, None]:
        """The request's events: text deltas as tokens decode, then the finish and usage.
        Every event carries the prompt's tokens (0 until its first token: a generation that
        never started used none) and the tokens generated so far. Closing
        it early ends the generation at the engine's next step. Refusals (OverBudget,
        ValueError) come before the first event."""
        limit, length_reason = completion_limit(
            len(prompt), request.max_tokens, request.token_budget, self._context
        )
        seq = Sequence(
            request.request_id,
            request.tenant,
            prompt,
            limit,
            start_by=start_by,
            priority=request.priority,
            length_reason=length_reason,
            weight=request.weight or 1.0,
            adapter=adapter,
        )
        tokens: list[int] = []
        text = IncrementalText(self.tokenizer)
        stops = StopText(request.stop)
        arrived = time.monotonic()
        first_at = arrived
        # Closed explicitly: an async for does not close what it iterates when left early,
        # and the driver frees the slot when its stream closes (a stop string ends it so).
        events = self.driver.generate(seq, sampling_of(request.sampling), constraint)
        counted = False
        try:
            async for event in events:
                delta = node_pb2.GenerateEvent()
                finish = event.finish
                if event.token is not None:
                    if not tokens:
                        first_at = time.monotonic()
                        self._metrics.ttft.labels(**self._labels).observe(first_at - arrived)
                    tokens.append(event.token)
                    delta.token_ids.append(event.token)
                    delta.text, stopped = stops.add(text.add(event.token))
                    if stopped:
                        finish = FinishReason.STOP
                # The prompt counts once it ran (its first token came): one refused or left
                # while it waited for a slot used nothing.
                prompt_used = len(prompt) if tokens else 0
                delta.prompt_tokens, delta.completion_tokens = prompt_used, len(tokens)
                if finish is not None:
                    if finish is event.finish:
                        delta.text += stops.flush()
                    delta.finish_reason = FINISH_TO_PROTO[finish]
                    self._finished(finish, prompt_used, tokens, first_at)
                    counted = True
                yield delta
                if finish is not None:
                    return
        finally:
            if not counted:  # the caller left (cancelled, its deadline): what ran is counted
                self._finished(FinishReason.CANCELLED, len(prompt) if tokens else 0, tokens, first_at)
            await events.aclose()

    def _finished(self, reason: FinishReason, prompt: int, tokens: list[int], first_at: float) -> None:
        m, labels = self._metrics, self._labels
        m.finished.labels(**labels, reason=reason.value).inc()
        m.generated.labels(**labels, kind="prompt").inc(prompt)
        m.generated.labels(**labels, kind="completion").inc(len(tokens))
        if len(tokens) > 1:
            m.tpot.labels(**labels).observe((time.monotonic() - first_at) / (len(tokens) - 1))

    async def close(self) -> None:
        """End its generations (CANCELLED) and stop its worker."""
        await self.driver.close()
