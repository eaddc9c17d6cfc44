"""The node's memory: its budget, what the process holds, what each version is charged, and
the room the placement policy (``ferryman_server.kernel.placement``) decides over."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import replace

import torch

from ferryman_server.gpu_node.slots import ModelSlot, SlotState
from ferryman_server.kernel.host import usable_memory
from ferryman_server.kernel.placement import NodeRoom

MIB = 1 << 20


class NodeMemory:
    """One node's memory accounting on its device."""

    def __init__(self, name: str, device: torch.device, budget_bytes: int, evict_after_idle_s: float) -> None:
        self.name = name
        self.device = device
        self.evict_after_idle_s = evict_after_idle_s
        # The device's size (or the container's limit) is fixed for the process's life: read
        # once, not on every NodeInfo and placement decision.
        self.budget = budget_bytes or self.totals()[0]
        """What the versions here may hold together (``memory_budget_bytes``, else the device's)."""

    def totals(self) -> tuple[int, int]:
        """The device's (or container's) total bytes, and what this process uses of them."""
        if self.device.type == "cuda":
            free, total = torch.cuda.mem_get_info(self.device)
            return int(total), int(total - free)
        with open("/proc/self/statm") as statm:
            resident = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        return usable_memory(), resident

    def held(self) -> int:
        """Memory this process holds on its device: CUDA's allocated bytes, or resident ones."""
        if self.device.type == "cuda":
            return int(torch.cuda.memory_allocated(self.device))
        return self.totals()[1]

    def measure(self, slot: ModelSlot, before: int) -> int:
        """Charge ``slot`` what the process gained since ``before`` (and a causal LM's whole
        KV cache, mapped on a CPU only as sequences write it), at least what was expected (a
        load can reuse heap an earlier one freed). Returns the measurement."""
        measured = max(0, self.held() - before)
        if slot.lm is not None and not slot.adapter and self.device.type == "cpu":
            measured += slot.lm.cache_bytes
        slot.memory_bytes = max(slot.memory_bytes, measured)
        return measured

    def room(self, slots: Mapping[str, ModelSlot], excluding: str = "") -> NodeRoom:
        """This node's memory as the placement policy sees it (failed versions hold nothing)."""
        now = time.monotonic()
        # A base version runs its adapters' generations: busy while any of them is.
        running = {s.base for s in slots.values() if s.base and s.in_flight}
        held = [
            slot.held(now, self.evict_after_idle_s)
            for key, slot in sorted(slots.items())
            if key != excluding and slot.state != SlotState.FAILED
        ]
        held = [replace(h, busy=True) if h.key in running else h for h in held]
        return NodeRoom(self.name, self.budget, tuple(held))

    def no_room_reason(self, key: str, need: int, slots: Mapping[str, ModelSlot]) -> str:
        room = self.room(slots, excluding=key)
        return (
            f"no room for {key} on node {self.name}: it needs {need / MIB:,.0f} MiB, "
            f"{max(0, room.budget - room.used) / MIB:,.0f} MiB of its {room.budget / MIB:,.0f} MiB budget "
            "is free and what it could evict would not make enough"
        )
