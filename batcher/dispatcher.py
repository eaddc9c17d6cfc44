"""Send batches to nodes: pick a replica, retry elsewhere on failure, isolate bad items.

A node that cannot be reached (or is draining, or lost the version) costs a retry on
another replica within the batch's deadline, with backoff, and a mark on its
breaker. A batch the model raises on is bisected until the failing items stand
alone: only they fail, each recorded as a dead letter; every other item succeeds.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence

import grpc
from google.rpc import status_pb2
from opentelemetry import trace
from opentelemetry.context import Context

from ferryman.durations import seconds_of
from ferryman.errors import Reason, make_status, reason_of
from ferryman.v1 import batcher_pb2, node_pb2
from ferryman_server.batcher.breaker import BreakerState
from ferryman_server.batcher.dead_letters import DeadLetters
from ferryman_server.batcher.entries import Entry, Finisher
from ferryman_server.batcher.fairness import SlotPolicy, batch_owner
from ferryman_server.batcher.metrics import BatcherMetrics
from ferryman_server.batcher.node_client import NodeCallError
from ferryman_server.batcher.predictor import LatencyPredictor
from ferryman_server.batcher.replicas import Replica, ReplicaDirectory
from ferryman_server.batcher.settings import BatcherSettings
from ferryman_server.kernel.logs import incident, internal_message
from ferryman_server.kernel.telemetry import links, traceparent, tracer
from ferryman_server.registry.tables import DeadLetter

log = logging.getLogger("ferryman.batcher")
RETRIABLE = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.CANCELLED,
    }
)

# Waiting for a free replica backs off up to 2**this times the base delay.
MAX_BACKOFF_DOUBLINGS = 5
BATCH_ID_CHARS = 16
"""A dispatch's id (hex): on its span, the node's batch spans and the node's logs."""

# What _call returns when it has already finished every entry (with an error).
_SETTLED = node_pb2.InferBatchResponse()


class NodeHung(Exception):
    """A batch outlived its timeout and the node did not answer a liveness probe."""


def owner_of(entries: Sequence[Entry]) -> str:
    """The tenant a batch of ``entries`` counts against for node slots."""
    rows: dict[str, int] = {}
    for entry in entries:
        rows[entry.tenant] = rows.get(entry.tenant, 0) + entry.rows
    return batch_owner(rows)


def is_model_error(status: status_pb2.Status) -> bool:
    return status.code == grpc.StatusCode.INTERNAL.value[0] and reason_of(status) == Reason.MODEL_ERROR


class Dispatcher:
    """Runs batches on replicas and hands every entry its result through ``finish``."""

    def __init__(
        self,
        settings: BatcherSettings,
        directory: ReplicaDirectory,
        metrics: BatcherMetrics,
        dead_letters: DeadLetters,
        finish: Finisher,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._settings = settings
        self._directory = directory
        self._metrics = metrics
        self._dead_letters = dead_letters
        self._finish = finish
        self._clock = clock
        self._tracer = tracer("ferryman.batcher")

    def reserve(
        self,
        version_key: str,
        rows: int,
        owner: str,
        exclude: frozenset[str] = frozenset(),
        policy: SlotPolicy | None = None,
    ) -> Replica | None:
        """Pick a replica and claim a batch slot on it now, before the batch is sent.

        Claiming synchronously keeps the scheduler's view of free slots exact when it
        dispatches several batches in one turn of the event loop. The slot counts
        against ``owner``; with ``policy``, only a replica where the policy lets the
        owner claim one is taken (a retry elsewhere is not held back: the work was
        already given its turn).
        """
        replica = self._directory.pick(version_key, set(exclude), owner, policy) or (
            self._directory.pick(version_key, set(), owner, policy) if exclude else None
        )
        if replica is not None:
            replica.claim(rows, owner)
        return replica

    async def dispatch(
        self,
        model: str,
        version: str,
        parameters: Mapping[str, str],
        entries: Sequence[Entry],
        predictor: LatencyPredictor,
        replica: Replica,
    ) -> None:
        """Run ``entries`` as one batch on the reserved ``replica`` (retrying elsewhere as needed).

        Every entry is finished exactly once; this never raises.
        """
        try:
            batch_id = uuid.uuid4().hex[:BATCH_ID_CHARS]
            with self._tracer.start_as_current_span(
                "batcher.dispatch",
                # A root, linked to every request of the batch: the task that dispatches runs
                # in the context of whichever request woke the queue (in-process, that is a
                # request's own span), and the batch belongs to all of them, none its parent.
                context=Context(),
                links=links([e.traceparent for e in entries]),
                attributes={
                    "ferryman.model": model,
                    "ferryman.version": version,
                    "ferryman.items": len(entries),
                    "ferryman.batch_id": batch_id,
                },
            ):
                await self._run(model, version, dict(parameters), list(entries), predictor, replica, batch_id)
        except Exception:  # a bug here must not strand callers
            correlation = incident(log, f"batch of {model}:{version} failed in the batcher")
            status = make_status(
                grpc.StatusCode.INTERNAL, internal_message(correlation), reason=Reason.BATCHER_ERROR
            )
            for entry in entries:
                if any(not w.done for w in entry.waiters):
                    self._finish(entry, batcher_pb2.ItemResult(status=status))

    async def _run(
        self,
        model: str,
        version: str,
        parameters: dict[str, str],
        entries: list[Entry],
        predictor: LatencyPredictor,
        replica: Replica | None = None,
        batch_id: str = "",
    ) -> None:
        key = f"{model}:{version}"
        rows = sum(e.rows for e in entries)
        owner = owner_of(entries)
        tried: set[str] = set()
        failures = 0
        waits = 0
        while True:
            remaining = max(e.deadline for e in entries) - self._clock()
            if remaining <= 0:
                if replica is not None:
                    replica.release(rows, owner)
                self._fail(entries, grpc.StatusCode.DEADLINE_EXCEEDED, "deadline passed before a node ran it")
                return
            if replica is None:
                replica = self.reserve(key, rows, owner, frozenset(tried))
            if replica is None:
                if not self._directory.ready(key):
                    unserved = self._directory.unserved(key)
                    if unserved is not None:
                        self._fail(entries, unserved.code, unserved.message, unserved.reason)
                        return
                    await self._directory.loads.wait(key, remaining)
                    continue
                # Every replica is busy or its breaker is open: wait for a slot, within the deadline.
                await asyncio.sleep(min(remaining, self._backoff(waits)))
                waits += 1
                continue
            response = await self._call(
                replica, model, version, parameters, entries, rows, owner, remaining, predictor, batch_id
            )
            if response is not None:
                await self._settle(model, version, parameters, entries, response, predictor, batch_id)
                return
            trace.get_current_span().add_event(
                "retry", {"ferryman.node": replica.name, "ferryman.attempt": failures}
            )
            tried.add(replica.name)
            replica = None
            failures += 1
            self._metrics.retries.labels(model=model, version=version).inc()
            if failures >= self._settings.max_attempts:
                self._fail(
                    entries, grpc.StatusCode.UNAVAILABLE, f"{key}: every attempt failed ({sorted(tried)})"
                )
                return
            await asyncio.sleep(self._backoff(failures - 1))

    def _backoff(self, attempt: int) -> float:
        capped = min(attempt, MAX_BACKOFF_DOUBLINGS)
        return float(self._settings.retry_backoff_s * 2**capped)

    async def _call(
        self,
        replica: Replica,
        model: str,
        version: str,
        parameters: dict[str, str],
        entries: list[Entry],
        rows: int,
        owner: str,
        budget_s: float,
        predictor: LatencyPredictor,
        batch_id: str,
    ) -> node_pb2.InferBatchResponse | None:
        """One InferBatch on a reserved replica; None when it failed and another try may succeed.
        The replica's slot is given back however this ends (a failure building the request
        included: the dispatcher's catch-all answers the callers, it cannot release slots)."""
        started = self._clock()
        try:
            request = node_pb2.InferBatchRequest(
                model=model,
                version=version,
                parameters=parameters,
                batch_id=batch_id,
                traceparent=traceparent(),  # the dispatch span: the node's batch span is its child
                items=[
                    node_pb2.BatchItem(request_id=e.request_id, inputs=e.inputs, traceparent=e.traceparent)
                    for e in entries
                ],
            )
            response = await self._watched(replica, request, budget_s, predictor.predict(rows))
        except NodeHung:
            # The node answered neither the batch in its time nor a liveness probe: keep
            # batches off it (the breaker opens at once) and run this one elsewhere.
            replica.breaker.trip(self._clock())
            self._directory.record_breaker(replica)
            trace.get_current_span().add_event("batch_timeout", {"ferryman.node": replica.name})
            self._metrics.batch_timeouts.labels(node=replica.name).inc()
            log.warning(
                "node %s answered neither a batch in its time nor a probe: out until its breaker half-opens",
                replica.name,
            )
            return None
        except NodeCallError as exc:
            if exc.code == grpc.StatusCode.DEADLINE_EXCEEDED:
                # The callers' budget ran out, not the node: a busy node must not trip its
                # breaker (that turns overload into an outage). Hung ones fail their probe.
                self._fail(entries, grpc.StatusCode.DEADLINE_EXCEEDED, "deadline passed while the batch ran")
                return _SETTLED
            if exc.code == grpc.StatusCode.FAILED_PRECONDITION:
                # The version left that node (evicted for another's load) before its heartbeat
                # said so: the node is healthy, only this version is gone from it.
                self._directory.note_evicted(replica.name, [f"{model}:{version}"])
                return None
            was_open = replica.breaker.state != BreakerState.CLOSED
            replica.breaker.on_failure(self._clock())
            self._directory.record_breaker(replica)
            if replica.breaker.state != BreakerState.CLOSED and not was_open:
                trace.get_current_span().add_event("breaker_open", {"ferryman.node": replica.name})
            if exc.code not in RETRIABLE:
                self._fail(entries, exc.code, f"node {replica.name}: {exc.details}")
                return _SETTLED
            return None
        finally:
            replica.release(rows, owner)
        replica.breaker.on_success()
        self._directory.record_breaker(replica)
        compute = seconds_of(response.compute)
        predictor.observe(max(1, response.batch_size), compute, self._clock() - started - compute)
        return response

    async def _watched(
        self, replica: Replica, request: node_pb2.InferBatchRequest, budget_s: float, predicted_s: float
    ) -> node_pb2.InferBatchResponse:
        """The node's answer within ``budget_s``. Each time the batch outlives its own timeout
        (``batch_timeout_factor`` x predicted, at least ``min_batch_timeout_s``) the node is
        probed: alive (merely slow: a long input, a loaded box) the batch keeps its time; no
        answer to the probe either raises NodeHung, well before the callers' deadline."""
        timeout_s = max(self._settings.min_batch_timeout_s, self._settings.batch_timeout_factor * predicted_s)
        call = asyncio.ensure_future(replica.node.infer_batch(request, budget_s))
        try:
            while True:
                done, _ = await asyncio.wait({call}, timeout=timeout_s)
                if done:
                    return call.result()
                try:
                    await replica.node.node_info(self._settings.liveness_probe_timeout_s)
                except NodeCallError:
                    raise NodeHung(replica.name) from None
        finally:
            if not call.done():
                call.cancel()

    async def _settle(
        self,
        model: str,
        version: str,
        parameters: dict[str, str],
        entries: list[Entry],
        response: node_pb2.InferBatchResponse,
        predictor: LatencyPredictor,
        batch_id: str,
    ) -> None:
        if response is _SETTLED:
            return
        if len(response.items) != len(entries):
            self._fail(entries, grpc.StatusCode.INTERNAL, "node returned a result count unlike the batch")
            return
        # Outcomes come in request order; request ids from different callers may repeat.
        failing: list[tuple[Entry, status_pb2.Status]] = []
        for entry, outcome in zip(entries, response.items, strict=True):
            if is_model_error(outcome.status):
                failing.append((entry, outcome.status))
                continue
            result = batcher_pb2.ItemResult(
                status=outcome.status, outputs=outcome.outputs, usage=outcome.usage, node=response.node
            )
            result.timing.compute.CopyFrom(response.compute)
            result.timing.batch_size = response.batch_size
            self._finish(entry, result)
        if not failing:
            return
        if len(entries) == 1:
            self._isolate(model, version, *failing[0])
            return
        suspects = [entry for entry, _ in failing]
        if len(suspects) == 1:
            # Alone it may still succeed (the batch as a whole may have been the problem).
            await self._run(model, version, parameters, suspects, predictor, batch_id=batch_id)
            return
        half = len(suspects) // 2
        await asyncio.gather(
            self._run(model, version, parameters, suspects[:half], predictor, batch_id=batch_id),
            self._run(model, version, parameters, suspects[half:], predictor, batch_id=batch_id),
        )

    def _isolate(self, model: str, version: str, entry: Entry, status: status_pb2.Status) -> None:
        self._metrics.dead_letters.labels(model=model, version=version).inc()
        self._dead_letters.record(
            DeadLetter(
                model=model,
                version=version,
                request_id=entry.request_id,
                tenant=entry.tenant,
                input_sha256=entry.input_hash,
                error=status.message,
            ),
            self._clock(),
        )
        self._finish(entry, batcher_pb2.ItemResult(status=status))

    def _fail(self, entries: Sequence[Entry], code: grpc.StatusCode, message: str, reason: str = "") -> None:
        status = make_status(code, message, reason=reason or code.name)
        for entry in entries:
            self._finish(entry, batcher_pb2.ItemResult(status=status))
