"""Iteration-level ("continuous") batching, decided per step as a pure function of the
sequences and a clock: every running sequence decodes one token, prompts are prefilled in
chunks within a per-step token budget (one long prompt cannot stall everyone's next token),
and free cache slots go to waiting sequences in the order of the admission policy (one
``WaitingOrder`` class each): by default Virtual Token Counter order (Sheng et al., OSDI
2024), the tenant that has received the least service, weighted, first.

A step is ``plan()`` (what runs), the model and the sampler (the engine's), then
``update(plan, output)``: the scheduler records what each sequence drew, charges it, and
decides which sequences finished and why."""

from __future__ import annotations

import collections
import enum
import heapq
import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from ferryman_server.gpu_node.generation.prefix import PrefixCache, Scope


class SeqState(enum.Enum):
    WAITING = "waiting"
    PREFILLING = "prefilling"
    DECODING = "decoding"
    FINISHED = "finished"


TRANSITIONS: dict[SeqState, frozenset[SeqState]] = {
    SeqState.WAITING: frozenset({SeqState.PREFILLING, SeqState.FINISHED}),
    # Back to WAITING: preempted, its slot given to a tenant below its share.
    SeqState.PREFILLING: frozenset({SeqState.DECODING, SeqState.WAITING, SeqState.FINISHED}),
    SeqState.DECODING: frozenset({SeqState.WAITING, SeqState.FINISHED}),
    SeqState.FINISHED: frozenset(),
}


class FinishReason(enum.Enum):
    STOP = "stop"
    LENGTH = "length"
    CANCELLED = "cancelled"
    QUOTA = "quota"
    DEADLINE = "deadline"
    ERROR = "error"


@dataclass(eq=False)
class Sequence:
    """One generation: its prompt's token ids, what it generated, where its cache lives."""

    id: str
    tenant: str
    prompt: list[int]
    max_tokens: int
    start_by: float = float("inf")
    """Clock time by which its first token must be on the way (a TTFT deadline): a sequence
    still waiting then is refused before it takes a slot."""
    priority: int = 0
    """Lower first, within its tenant's turn."""
    length_reason: FinishReason = FinishReason.LENGTH
    """Why reaching ``max_tokens`` ends it: LENGTH, or QUOTA when its token budget set it."""
    weight: float = 1.0
    """Its tenant's weight (from the registry): a share of slots and tokens."""
    state: SeqState = SeqState.WAITING
    slot: int | None = None
    prefilled: int = 0
    generated: list[int] = field(default_factory=list)
    finish: FinishReason | None = None
    order: int = 0
    """Arrival order (set by the scheduler): a preempted sequence keeps its place."""
    preemptions: int = 0
    replay: list[int] = field(default_factory=list)
    """What a preempted sequence prefills again when it resumes: its prompt and every token
    it generated but the last (which the next decode feeds)."""
    adapter: int = 0
    """The LoRA adapter it runs under (0: the base model)."""
    stop_tokens: frozenset[int] = frozenset()
    """Tokens that end it (STOP) once drawn: its model's end of turn."""

    @property
    def scope(self) -> Scope:
        """Whose prefix cache it may read and leaves: its tenant's, under its adapter."""
        return (self.tenant, self.adapter)

    @property
    def context(self) -> list[int]:
        """The tokens to prefill: the prompt, or after a preemption the replay."""
        return self.replay or self.prompt

    def move(self, target: SeqState) -> None:
        if target not in TRANSITIONS[self.state]:
            raise ValueError(f"sequence {self.id}: {self.state.value} -> {target.value} is not allowed")
        self.state = target

    @property
    def last_position(self) -> int:
        """Cache position of the newest generated token (decoded next)."""
        return len(self.prompt) + len(self.generated) - 1

    @property
    def cached(self) -> list[int]:
        """The tokens its slot's cache holds: what it prefilled, and once decoding, its
        prompt and every generated token but the newest (not fed yet)."""
        if self.state == SeqState.DECODING:
            return (self.prompt + self.generated)[: self.last_position]
        return self.context[: self.prefilled]


class VirtualTokenCounter:
    """Service received per tenant, in weighted tokens: charged for prompt tokens when a
    sequence is admitted and for each token generated. A tenant that had nothing waiting or
    running is lifted to the least counter among busy tenants when it comes back, so idling
    earns no credit to burst with later."""

    def __init__(self, weights: dict[str, float] | None = None) -> None:
        self._weights = weights or {}
        self.counters: dict[str, float] = {}

    def weight(self, tenant: str) -> float:
        return self._weights.get(tenant, 1.0)

    def set_weight(self, tenant: str, weight: float) -> None:
        """A tenant's weight as its latest request carries it (the registry may change it)."""
        self._weights[tenant] = weight

    def charge(self, tenant: str, tokens: int) -> None:
        self.counters[tenant] = self.counters.get(tenant, 0.0) + tokens / self.weight(tenant)

    def arrive(self, tenant: str, busy: Iterable[str]) -> None:
        """``tenant`` has work again; ``busy`` are the tenants that kept theirs."""
        floor = min((self.counters.get(t, 0.0) for t in busy if t != tenant), default=None)
        if floor is not None:
            self.counters[tenant] = max(self.counters.get(tenant, 0.0), floor)

    def least(self, tenants: Iterable[str], held: Mapping[str, int] | None = None) -> str:
        """The tenant with the least service; on a tie (a tenant back from idle is lifted to
        the busy ones' minimum), the one holding fewer slots (``held``)."""
        held = held or {}
        return min(tenants, key=lambda t: (self.counters.get(t, 0.0), held.get(t, 0), t))


@dataclass(frozen=True)
class StepPlan:
    """What one step runs: prompt chunks (sequence, start, end) and one decode for all."""

    prefill: list[tuple[Sequence, int, int]]
    decode: list[Sequence]
    refused: list[Sequence]
    """Waiting past their start-by time: finished DEADLINE without taking a slot."""


@dataclass(frozen=True)
class TokenEvent:
    """A token for ``seq_id`` (None when it ended without one), and its finish if it ended;
    ``reason`` says why an ERROR ended it (for the log, never the tenant)."""

    seq_id: str
    token: int | None
    finish: FinishReason | None = None
    reason: str = ""


@dataclass(frozen=True)
class StepOutput:
    """What the model and the sampler made of a step's plan."""

    tokens: Mapping[str, int]
    """The token each sequence drew (a decode, or a prompt whose last chunk ran)."""
    ended: Mapping[str, tuple[FinishReason, str]] = field(default_factory=dict)
    """Sequences that ended for a reason of their own, and why: their constraint completed
    (STOP, after the token drawn) or failed, their prefill, decode or logits failed (ERROR)."""


class Admission(enum.Enum):
    """Who gets a free slot: the tenant with the least service (VTC), or the oldest
    request whoever sent it (FCFS: what vLLM and TGI do; kept to measure against)."""

    VTC = "vtc"
    FCFS = "fcfs"


class WaitingOrder(Protocol):
    """An admission policy: whose waiting sequence takes a free slot, and whose running one
    gives its slot back when none is free."""

    def next_tenant(self, scheduler: Scheduler, tenants: list[str], now: float) -> str | None:
        """Of ``tenants`` (each with a sequence waiting), the one whose next sequence is
        admitted now; None: keep the free slots."""
        ...

    def victim(self, scheduler: Scheduler, now: float) -> Sequence | None:
        """A running sequence to preempt for a waiting one (no slot being free), or None."""
        ...


class FcfsOrder:
    """The oldest waiting sequence, whoever sent it; never preempts."""

    def next_tenant(self, scheduler: Scheduler, tenants: list[str], now: float) -> str | None:
        return min(tenants, key=lambda t: scheduler.head(t).order)

    def victim(self, scheduler: Scheduler, now: float) -> Sequence | None:
        return None


class VtcOrder:
    """Slots shared by weight among the active tenants: a tenant below its share goes first,
    the least served (Virtual Token Counter) among equals; one free slot is kept for each
    active tenant below its share that waits for none; a tenant above its share gives its
    newest sequence's slot to one below it."""

    def next_tenant(self, scheduler: Scheduler, tenants: list[str], now: float) -> str | None:
        shares = scheduler.shares(now)
        held = collections.Counter(s.tenant for s in scheduler.running)
        counters = scheduler.counter.counters
        tenant = min(tenants, key=lambda t: (held[t] >= shares[t], counters.get(t, 0.0), held[t], t))
        if held[tenant] >= shares[tenant]:
            # One free slot stays kept for each active tenant below its share that waits for
            # none: its next request starts at once instead of behind a long generation.
            kept = sum(1 for t in scheduler.recent() if t not in tenants and held[t] < shares[t])
            if scheduler.free_slots <= min(kept, scheduler.slots - 1):
                return None
        return tenant

    def victim(self, scheduler: Scheduler, now: float) -> Sequence | None:
        shares = scheduler.shares(now)
        held = collections.Counter(s.tenant for s in scheduler.running)
        if not any(held[t] < shares[t] for t in scheduler.waiting_tenants()):
            return None
        over = [s for s in scheduler.running if held[s.tenant] > shares[s.tenant]]
        return max(over, key=lambda s: s.order) if over else None


ORDERS: dict[Admission, type[FcfsOrder] | type[VtcOrder]] = {
    Admission.VTC: VtcOrder,
    Admission.FCFS: FcfsOrder,
}


class Scheduler:
    """Admission, chunked prefill and the running set over ``slots`` cache slots.

    Under VTC the slots are shared by weight among the tenants with work or active within
    ``active_s``; a tenant below its share goes first, the least served among equals. A
    tenant that waits for nothing and holds less than its share has one free slot kept for
    it, and one that waits with no slot free takes the slot of the newest generation of a
    tenant above its share (preempted). A tenant alone uses every slot."""

    def __init__(
        self,
        slots: int,
        step_tokens: int,
        counter: VirtualTokenCounter,
        admission: Admission = Admission.VTC,
        active_s: float = 0.0,
        prefix_cache: bool = False,
    ) -> None:
        if step_tokens <= slots:
            raise ValueError("the step token budget must exceed the slots: decodes alone use one each")
        self.counter = counter
        self.slots = slots
        self._step_tokens = step_tokens
        self._order_policy: WaitingOrder = ORDERS[admission]()
        self._active_s = active_s
        self._free = list(range(slots))
        self.prefix = PrefixCache(slots, prefix_cache)
        self._order = itertools.count()
        # Per tenant, a heap by (priority, arrival): its head is the next to admit.
        self._waiting: dict[str, list[tuple[int, int, Sequence]]] = {}
        self._seen: dict[str, float] = {}
        """When each tenant last sent a sequence (within ``active_s``)."""
        self.running: list[Sequence] = []
        self.preemptions = 0

    @property
    def waiting(self) -> int:
        return sum(len(q) for q in self._waiting.values())

    @property
    def free_slots(self) -> int:
        return len(self._free)

    def head(self, tenant: str) -> Sequence:
        """The sequence of ``tenant`` admitted next (it has one waiting)."""
        return self._waiting[tenant][0][2]

    def waiting_tenants(self) -> list[str]:
        return [t for t, q in self._waiting.items() if q]

    def recent(self) -> list[str]:
        """The tenants seen within ``active_s`` (as of the last ``shares``)."""
        return list(self._seen)

    def busy_tenants(self) -> set[str]:
        return {s.tenant for s in self.running} | {t for t, q in self._waiting.items() if q}

    def add(self, seq: Sequence, now: float = 0.0) -> None:
        busy = self.busy_tenants()
        self.counter.set_weight(seq.tenant, seq.weight)
        if seq.tenant not in busy:
            self.counter.arrive(seq.tenant, busy)
        self._seen[seq.tenant] = now
        seq.order = next(self._order)
        heapq.heappush(self._waiting.setdefault(seq.tenant, []), (seq.priority, seq.order, seq))

    def finish(self, seq: Sequence, reason: FinishReason) -> None:
        """End ``seq`` now, wherever it is; its slot is free for the next step."""
        if seq.state == SeqState.FINISHED:
            return
        if seq.state == SeqState.WAITING:
            queue = [e for e in self._waiting.get(seq.tenant, []) if e[2] is not seq]
            heapq.heapify(queue)
            self._waiting[seq.tenant] = queue
        else:
            self.running.remove(seq)
        if seq.slot is not None:
            self.prefix.leave(seq.slot, seq.scope, seq.cached)
            self._free.append(seq.slot)
            seq.slot = None
        seq.finish = reason
        seq.move(SeqState.FINISHED)

    def shares(self, now: float) -> dict[str, float]:
        """Slots each active tenant may count on: the slots split among the tenants with work
        or seen within ``active_s``, by weight (a tenant alone gets them all)."""
        for tenant in [t for t, at in self._seen.items() if now - at > self._active_s]:
            del self._seen[tenant]  # bounded by the tenants active in the window
        active = set(self._seen) | self.busy_tenants()
        total = sum(self.counter.weight(t) for t in active) or 1.0
        # Never below one slot: with more tenants than slots, a tenant holding one would be
        # "above its share" and preempted for another, then the other for it, every step.
        return {t: max(1.0, self.slots * self.counter.weight(t) / total) for t in active}

    def _next_waiting(self, now: float) -> Sequence | None:
        tenants = self.waiting_tenants()
        if not tenants:
            return None
        tenant = self._order_policy.next_tenant(self, tenants, now)
        return None if tenant is None else heapq.heappop(self._waiting[tenant])[2]

    def _preempt(self, now: float) -> None:
        """Free a slot for a waiting sequence when none is free, if the policy names a
        victim: it goes back to waiting, first in its tenant's line, and recomputes its
        cache when it resumes (nothing it generated is lost). Without this (VTC) a heavy
        tenant that filled the slots while alone keeps them for as long as its generations
        run."""
        if self._free:
            return
        victim = self._order_policy.victim(self, now)
        if victim is None:
            return
        self.running.remove(victim)
        assert victim.slot is not None
        self.prefix.leave(victim.slot, victim.scope, victim.cached)
        self._free.append(victim.slot)
        victim.slot, victim.prefilled = None, 0
        victim.replay = victim.prompt + victim.generated[:-1] if victim.generated else []
        victim.start_by = float("inf")  # it started in time; its TTFT deadline is met
        victim.preemptions += 1
        victim.move(SeqState.WAITING)
        heapq.heappush(self._waiting.setdefault(victim.tenant, []), (victim.priority, victim.order, victim))
        self.preemptions += 1

    def _expired(self, now: float) -> list[Sequence]:
        """Waiting sequences past their start-by time, finished DEADLINE: refused at once,
        slots free or not (a full engine must not hold them until a slot frees)."""
        expired: list[Sequence] = []
        for tenant, queue in self._waiting.items():
            if any(now > e[2].start_by for e in queue):
                expired += [e[2] for e in queue if now > e[2].start_by]
                kept = [e for e in queue if now <= e[2].start_by]
                heapq.heapify(kept)
                self._waiting[tenant] = kept
        for seq in expired:
            seq.finish = FinishReason.DEADLINE
            seq.move(SeqState.FINISHED)
        return expired

    def plan(self, now: float) -> StepPlan:
        """The next step. Decodes come first (each running sequence's next token), then the
        chunks of prompts under way, then new admissions while slots and budget last (a
        preemption first, when a tenant below its share waits and no slot is free)."""
        self._preempt(now)
        decode = [s for s in self.running if s.state == SeqState.DECODING]
        budget = self._step_tokens - len(decode)
        prefill: list[tuple[Sequence, int, int]] = []
        for seq in self.running:
            if seq.state == SeqState.PREFILLING and budget > 0:
                end = min(len(seq.context), seq.prefilled + budget)
                prefill.append((seq, seq.prefilled, end))
                budget -= end - seq.prefilled
        refused = self._expired(now)
        while self._free and budget > 0 and (new := self._next_waiting(now)) is not None:
            # A slot whose cache already holds the start of its context, when one does.
            new.slot, new.prefilled = self.prefix.take(self._free, new.scope, new.context)
            new.move(SeqState.PREFILLING)
            self.running.append(new)
            if not new.preemptions:  # a resumed sequence was charged when first admitted
                self.counter.charge(new.tenant, len(new.prompt))
            end = min(len(new.context), new.prefilled + budget)
            prefill.append((new, new.prefilled, end))
            budget -= end - new.prefilled
        return StepPlan(prefill, decode, refused)

    def update(self, plan: StepPlan, output: StepOutput) -> list[TokenEvent]:
        """Record what ``plan``'s step made: each prompt's progress, each token drawn (charged
        to its tenant's counter), and every finish: refused before a slot (DEADLINE), ended
        for a reason of its own (``output.ended``), a stop token, or the token limit."""
        events = [TokenEvent(seq.id, None, FinishReason.DEADLINE) for seq in plan.refused]
        for seq, _, end in plan.prefill:
            if seq.state == SeqState.PREFILLING and seq.id not in output.ended:
                seq.prefilled = end
                if end == len(seq.context):
                    seq.move(SeqState.DECODING)
        stepped = [seq for seq, _, _ in plan.prefill] + plan.decode
        for seq in stepped:
            if seq.state == SeqState.FINISHED:
                continue  # ended before this step ran (cancelled), or listed twice
            token = output.tokens.get(seq.id)
            ended, reason = output.ended.get(seq.id, (None, ""))
            if token is None:
                if ended is not None:
                    self.finish(seq, ended)
                    events.append(TokenEvent(seq.id, None, ended, reason))
                continue
            seq.generated.append(token)
            self.counter.charge(seq.tenant, 1)
            finish = ended
            if finish is None and token in seq.stop_tokens:
                finish = FinishReason.STOP
            elif finish is None and len(seq.generated) >= seq.max_tokens:
                finish = seq.length_reason
            if finish is not None:
                self.finish(seq, finish)
            events.append(TokenEvent(seq.id, token, finish, reason))
        return events
