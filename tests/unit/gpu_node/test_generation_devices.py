"""Device discipline, checked on a CPU: the engine's step runs on a pretend accelerator, and
every torch call that mixes a tensor on it with a host tensor (other than a 0-dim scalar,
which CUDA accepts), or hands a host random generator to device tensors, is a violation, as
it would be an error on CUDA. The engine must make what it needs on the model's device
(masks, indices, sampling parameters), read back only what it must per step, and keep its
seeded sampling reproducible there."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from generation_fakes import VOCAB
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

from ferryman_server.gpu_node.generation.engine import GenerationEngine
from ferryman_server.gpu_node.generation.sampler import GREEDY, Sampling
from ferryman_server.gpu_node.generation.scheduler import (
    FinishReason,
    Scheduler,
    Sequence,
    TokenEvent,
    VirtualTokenCounter,
)

MAX_LEN = 256
ACCELERATOR = torch.device("meta")
"""The pretend accelerator's name: its tensors hold real data on the host, tagged."""


class OnAccelerator(torch.Tensor):
    """A tensor that lives on the pretend accelerator (ops on it stay on it)."""

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return ACCELERATOR


def on_accelerator(value: Any) -> Any:
    return value.as_subclass(OnAccelerator) if isinstance(value, torch.Tensor) else value


def is_accelerator(device: object) -> bool:
    return isinstance(device, (str, torch.device)) and torch.device(device) == ACCELERATOR


class Accelerator(TorchFunctionMode):
    """Records every call that would mix devices on CUDA, and every read back to the host."""

    def __init__(self) -> None:
        super().__init__()
        self.violations: list[str] = []
        self.reads = 0

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = dict(kwargs or {})
        name = getattr(func, "__name__", str(func))
        tensors = [a for a in pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
        on = any(isinstance(t, OnAccelerator) for t in tensors)
        host = [t for t in tensors if not isinstance(t, OnAccelerator) and t.dim() > 0]
        if on and host:
            self.violations.append(f"{name} mixes the accelerator with {len(host)} host tensor(s)")
        if on and kwargs.get("generator") is not None:
            self.violations.append(f"{name} takes a host generator for accelerator tensors")
        # Made on (or moved to) the accelerator: made on the host, then tagged.
        moved = False
        if is_accelerator(kwargs.get("device")):
            kwargs["device"], moved = "cpu", True
        if name == "to" and any(is_accelerator(a) for a in args[1:]):
            args, moved = tuple("cpu" if is_accelerator(a) else a for a in args), True
        if name in ("tolist", "item", "__int__", "__bool__", "__float__") and on:
            self.reads += 1
        result = func(*args, **kwargs)
        return pytree.tree_map(on_accelerator, result) if moved else result


class AcceleratorModel:
    """The counting model (next token = last + 1) with its logits on the accelerator."""

    device = ACCELERATOR

    def _logits(self, token: int) -> torch.Tensor:
        logits = torch.zeros(VOCAB)
        logits[(token + 1) % VOCAB] = 1.0
        return logits

    def prefill(self, slot: int, tokens: list[int], start: int, adapter: int = 0) -> torch.Tensor:
        return on_accelerator(self._logits(tokens[-1]))  # type: ignore[no-any-return]

    def decode(
        self, slots: list[int], tokens: list[int], positions: list[int], adapters: list[int] | None = None
    ) -> torch.Tensor:
        return on_accelerator(torch.stack([self._logits(t) for t in tokens]))  # type: ignore[no-any-return]


class EvenTokens:
    """Allows only even tokens, as a grammar does: its state on the host. ``mask`` is the
    form of the same constraint that applies itself to the logits."""

    def allowed(self, vocab: int) -> torch.Tensor:
        return torch.from_numpy(np.arange(vocab) % 2 == 0)

    def mask(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.masked_fill(~self.allowed(logits.shape[-1]), float("-inf"))

    def consume(self, token: int) -> None:
        pass

    @property
    def finished(self) -> FinishReason | None:
        return None


@contextmanager
def accelerator() -> Iterator[Accelerator]:
    mode = Accelerator()
    with mode:
        yield mode


def run_all(e: GenerationEngine, mode: Accelerator) -> tuple[list[TokenEvent], int]:
    """Every step until idle; the events, and the steps run."""
    events: list[TokenEvent] = []
    steps = 0
    while not e.idle:
        events += e.step()
        steps += 1
    return events, steps


def submit_mixed(e: GenerationEngine) -> None:
    e.submit(Sequence("greedy", "t", [3], max_tokens=6), GREEDY)
    e.submit(Sequence("seeded", "t", [5], max_tokens=6), Sampling(temperature=1.0, top_p=0.9, seed=3))
    e.submit(Sequence("top-k", "t", [7], max_tokens=6), Sampling(temperature=0.7, top_k=5, seed=4))
    e.submit(Sequence("json", "t", [9], max_tokens=6), Sampling(temperature=1.0, seed=8), EvenTokens())


def engine() -> GenerationEngine:
    return GenerationEngine(
        AcceleratorModel(), Scheduler(4, 32, VirtualTokenCounter()), MAX_LEN, stop_tokens=()
    )


def tokens_of(events: list[TokenEvent]) -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for event in events:
        if event.token is not None:
            found.setdefault(event.seq_id, []).append(event.token)
    return found


def test_a_step_never_mixes_the_models_device_with_the_host() -> None:
    e = engine()
    with accelerator() as mode:
        submit_mixed(e)
        events, steps = run_all(e, mode)
    assert mode.violations == []
    # Per step, one read back of the drawn ids (and finite flags) for all the rows.
    assert 0 < mode.reads <= steps
    tokens = tokens_of(events)
    assert tokens["greedy"] == [4, 5, 6, 7, 8, 9]
    assert all(t % 2 == 0 for t in tokens["json"]) and len(tokens["json"]) == 6
    assert all(event.finish in (None, FinishReason.LENGTH) for event in events)


def test_seeded_sampling_gives_the_same_tokens_on_the_accelerator_and_the_host() -> None:
    on_device = engine()
    with accelerator() as mode:
        submit_mixed(on_device)
        device_events, _ = run_all(on_device, mode)
    host = GenerationEngine(_HostModel(), Scheduler(4, 32, VirtualTokenCounter()), MAX_LEN, stop_tokens=())
    submit_mixed(host)
    host_events: list[TokenEvent] = []
    while not host.idle:
        host_events += host.step()
    assert tokens_of(device_events) == tokens_of(host_events)


class _HostModel(AcceleratorModel):
    def prefill(self, slot: int, tokens: list[int], start: int, adapter: int = 0) -> torch.Tensor:
        return self._logits(tokens[-1])

    def decode(
        self, slots: list[int], tokens: list[int], positions: list[int], adapters: list[int] | None = None
    ) -> torch.Tensor:
        return torch.stack([self._logits(t) for t in tokens])


def test_the_check_catches_what_would_fail_on_cuda() -> None:
    """A host mask applied to device logits, and a host generator drawing from device
    probabilities: both raise on CUDA, both are caught here."""
    logits = on_accelerator(torch.zeros(2, VOCAB))
    with accelerator() as mode:
        EvenTokens().mask(logits[0])
        torch.multinomial(torch.softmax(logits, -1), 1, generator=torch.Generator().manual_seed(1))
    assert len(mode.violations) == 2, mode.violations
