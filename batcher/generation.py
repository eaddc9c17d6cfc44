"""Generations through the batcher: each goes to a node serving its version, which batches
it with its other generations step by step (``ferryman_server.gpu_node.generation``). The batcher picks the
replica (fewest running generations, breakers respected) and fails over to another only
before the first event: after that, tokens have reached the caller and a second run would
be a different answer."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Callable

import grpc

from ferryman.durations import set_seconds
from ferryman.errors import CallFailed, Reason, make_status
from ferryman.v1 import batcher_pb2, node_pb2
from ferryman_server.batcher.node_client import NodeCallError
from ferryman_server.batcher.replicas import Replica, ReplicaDirectory

RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.FAILED_PRECONDITION})
"""Codes on which another replica may serve the generation: the node is gone, draining or
no longer holds the version."""
PASSED_ON = {
    grpc.StatusCode.INVALID_ARGUMENT: Reason.INVALID_INPUT,
    grpc.StatusCode.RESOURCE_EXHAUSTED: Reason.QUOTA_EXCEEDED,
    grpc.StatusCode.DEADLINE_EXCEEDED: Reason.DEADLINE,
}
"""A node's refusal that is about the request itself, not the node: passed to the caller."""


def failed(code: grpc.StatusCode, message: str, reason: str) -> CallFailed:
    return CallFailed(make_status(code, message, reason=reason))


def node_request(item: batcher_pb2.GenerateItem, start_within_s: float) -> node_pb2.NodeGenerateRequest:
    """The node's request for a generation that must start within ``start_within_s``."""
    request = node_pb2.NodeGenerateRequest(
        model=item.model,
        version=item.version,
        request_id=item.request_id,
        tenant=item.tenant,
        weight=item.weight,
        prompt=item.prompt,
        messages=item.messages,
        max_tokens=item.max_tokens,
        sampling=item.sampling,
        priority=-int(item.priority),  # the node runs lower first; the API's HIGH is larger
        token_budget=item.token_budget,
        stop=item.stop,
    )
    set_seconds(request.start_within, max(0.0, start_within_s))
    return request


def relayed(event: node_pb2.GenerateEvent) -> batcher_pb2.GenerationEvent:
    """A node's event as the batcher streams it to the router."""
    return batcher_pb2.GenerationEvent(
        text=event.text,
        token_ids=event.token_ids,
        finish_reason=event.finish_reason,
        prompt_tokens=event.prompt_tokens,
        completion_tokens=event.completion_tokens,
    )


class GenerationRelay:
    """``generate`` streams one generation from a node; refusals raise CallFailed."""

    def __init__(
        self,
        directory: ReplicaDirectory,
        max_attempts: int,
        accepting: Callable[[], bool],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._directory = directory
        self._max_attempts = max_attempts
        self._accepting = accepting
        self._clock = clock

    def _pick(self, key: str, tried: set[str]) -> Replica | None:
        now = self._clock()
        candidates = [r for r in self._directory.ready(key) if r.name not in tried and r.breaker.allows(now)]
        return min(candidates, key=lambda r: (r.generations, r.name), default=None)

    async def generate(
        self, item: batcher_pb2.GenerateItem, deadline: float
    ) -> AsyncGenerator[batcher_pb2.GenerationEvent]:
        """The generation's events from a node, by ``deadline`` (the relay's clock), in the
        batcher's own contract. Close it (``aclose``) when the caller leaves: that ends the
        generation on the node."""
        key = f"{item.model}:{item.version}"
        if not self._accepting():
            raise failed(grpc.StatusCode.UNAVAILABLE, "the batcher is draining", Reason.DRAINING)
        if key not in self._directory.versions:
            raise failed(grpc.StatusCode.NOT_FOUND, f"unknown version {key}", Reason.UNKNOWN_VERSION)
        tried: set[str] = set()
        last = ""
        while len(tried) < self._max_attempts:
            remaining = deadline - self._clock()
            if remaining <= 0:
                raise failed(grpc.StatusCode.DEADLINE_EXCEEDED, "no node started it in time", Reason.DEADLINE)
            replica = self._pick(key, tried)
            if replica is None and not tried and not self._directory.ready(key):
                unserved = self._directory.unserved(key)
                if unserved is not None:
                    raise failed(unserved.code, unserved.message, unserved.reason)
                await self._directory.loads.wait(key, remaining)
                continue
            if replica is None:
                break
            started = False
            replica.begin_generation()
            events = replica.node.generate(node_request(item, remaining), remaining)
            try:
                async for event in events:
                    started = True
                    yield relayed(event)
                replica.breaker.on_success()
                return
            except NodeCallError as exc:
                if exc.code in PASSED_ON and not started:
                    raise failed(exc.code, exc.details, PASSED_ON[exc.code]) from None
                if exc.code == grpc.StatusCode.UNAVAILABLE:
                    replica.breaker.on_failure(self._clock())
                    self._directory.record_breaker(replica)
                if started or exc.code not in RETRYABLE:
                    raise failed(exc.code, f"{replica.name}: {exc.details}", Reason.NO_REPLICA) from None
                tried.add(replica.name)
                last = f"{replica.name}: {exc.code.name} {exc.details}"
            finally:
                await events.aclose()
                replica.end_generation()
        message = self._directory.no_replica(key) + (f" (last: {last})" if last else "")
        raise failed(grpc.StatusCode.UNAVAILABLE, message, Reason.NO_REPLICA)
