"""One generation through the router: bound, route, reserve prompt + max_tokens (or what
the tenant's token and cost limits leave), stream from a batcher, settle what was produced.

The reservation is an upper bound the node enforces as the generation's token budget: a
hard limit reached mid-stream ends it with FINISH_REASON_QUOTA at that step, and nothing
beyond it is ever generated or charged. However the stream ends (finish, failure, the
caller leaving), the tokens seen so far are committed once; a generation that never
reached a node is released."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import uuid
from collections.abc import AsyncGenerator
from typing import cast

import grpc
import orjson

from ferryman.durations import set_seconds
from ferryman.errors import CallFailed, Reason, status_code
from ferryman.v1 import batcher_pb2, common_pb2, inference_pb2
from ferryman_server.kernel.quota import Ask, Decision
from ferryman_server.registry.snapshot import TenantRecord, VersionRecord
from ferryman_server.registry.states import ModelFormat
from ferryman_server.router.batchers import BatcherPort
from ferryman_server.router.bounds import Violation, check_names, clip
from ferryman_server.router.failures import RequestFailed, fail
from ferryman_server.router.fingerprint import DIGEST_BYTES
from ferryman_server.router.metrics import RouterMetrics
from ferryman_server.router.reservations import Reservations
from ferryman_server.router.service import RouterService
from ferryman_server.router.settings import RouterSettings
from ferryman_server.router.validation import price

ROLES = frozenset({"system", "user", "assistant"})
MAX_MESSAGES = 64
MAX_STOPS = 4
MAX_STOP_CHARS = 64
MAX_TEMPERATURE = 2.0
MAX_SCHEMA_CHARS = 65_536
"""A JSON schema's text at most: what the node compiles into a grammar for the request."""
MARKER_TOKENS_PER_MESSAGE = 8
"""A chat template's tokens around one message (start, role, separators, end): SmolLM2's
ChatML uses 5."""
TEMPLATE_TOKENS = 128
"""A chat template's tokens besides the messages: its generation prompt and a default
system message (SmolLM2 adds one of about 20 tokens when the chat has none)."""
PROMPT_INPUT = "prompt"
"""The text input a generative version's schema declares: its length bounds the prompt."""
FINISH_ON_FAILURE = {
    grpc.StatusCode.DEADLINE_EXCEEDED: common_pb2.FINISH_REASON_DEADLINE,
    grpc.StatusCode.CANCELLED: common_pb2.FINISH_REASON_CANCELLED,
}
"""How a stream that fails after its first token ends (anything else: ERROR)."""


def check_generate(request: inference_pb2.GenerateRequest, max_tokens: int) -> list[Violation]:
    """Violations of a generation's ids, names, messages, sampling and stops."""
    violations = check_names(request)
    if bool(request.prompt) == bool(request.messages):
        violations.append(("prompt", "give either a prompt or chat messages"))
    if len(request.messages) > MAX_MESSAGES:
        violations.append(("messages", f"more than {MAX_MESSAGES} messages"))
    else:
        violations += [
            (f"messages[{i}].role", f"must be one of {', '.join(sorted(ROLES))}")
            for i, message in enumerate(request.messages)
            if message.role not in ROLES
        ]
    if not 1 <= request.max_tokens <= max_tokens:
        violations.append(("max_tokens", f"must be between 1 and {max_tokens}"))
    sampling = request.sampling
    if not 0 <= sampling.temperature <= MAX_TEMPERATURE:
        violations.append(("sampling.temperature", f"must be between 0 and {MAX_TEMPERATURE:g}"))
    if not 0 <= sampling.top_p <= 1:
        violations.append(("sampling.top_p", "must be between 0 and 1 (0: no cut)"))
    if sampling.top_k < 0:
        violations.append(("sampling.top_k", "must not be negative"))
    if sampling.WhichOneof("structured") == "json_schema":
        violations += schema_violations(sampling.json_schema)
    if len(request.stop) > MAX_STOPS:
        violations.append(("stop", f"more than {MAX_STOPS} stop strings"))
    elif any(not 0 < len(stop) <= MAX_STOP_CHARS for stop in request.stop):
        violations.append(("stop", f"each stop string has 1 to {MAX_STOP_CHARS} characters"))
    return violations


def schema_violations(schema: str) -> list[Violation]:
    """A JSON schema's shape, before a node compiles it: bounded, and a JSON object."""
    if len(schema) > MAX_SCHEMA_CHARS:
        return [("sampling.json_schema", f"longer than {MAX_SCHEMA_CHARS} characters")]
    try:
        parsed = orjson.loads(schema)
    except orjson.JSONDecodeError:
        return [("sampling.json_schema", "is not JSON")]
    if not isinstance(parsed, dict):
        return [("sampling.json_schema", "must be a JSON object (a JSON Schema)")]
    return []


def prompt_chars(request: inference_pb2.GenerateRequest) -> int:
    return len(request.prompt) + sum(len(m.content) for m in request.messages)


def prompt_bound(request: inference_pb2.GenerateRequest) -> int:
    """An upper bound on the prompt's tokens, known before any tokenizer runs: one per
    UTF-8 byte (byte-level BPE reaches it), plus the chat template's own tokens. The node
    enforces the budget built on it, so a template larger than assumed is refused, never
    charged beyond the reservation."""
    if request.prompt:
        return len(request.prompt.encode()) + MARKER_TOKENS_PER_MESSAGE
    return TEMPLATE_TOKENS + sum(
        len(m.role.encode()) + len(m.content.encode()) + MARKER_TOKENS_PER_MESSAGE for m in request.messages
    )


def fingerprint(request: inference_pb2.GenerateRequest) -> str:
    """A digest of everything the generation asks for (all but its id and deadline)."""
    asked = inference_pb2.GenerateRequest()
    asked.CopyFrom(request)
    asked.ClearField("request_id")
    asked.ClearField("timeout")
    return hashlib.blake2b(asked.SerializeToString(deterministic=True), digest_size=DIGEST_BYTES).hexdigest()


def cost_of(version: VersionRecord, tokens: int) -> float:
    """The price of one generation of ``tokens`` (prompt and completion) on ``version``."""
    return price(1, tokens, version.price_per_item_usd, version.price_per_1k_tokens_usd)


class Generator:
    """``generate`` streams one generation's answers; refusals before the first token raise
    RequestFailed, later failures end the stream with a finish reason."""

    def __init__(
        self,
        settings: RouterSettings,
        service: RouterService,
        reservations: Reservations,
        batchers: BatcherPort,
        metrics: RouterMetrics,
    ) -> None:
        self._settings = settings
        self._service = service
        self._reservations = reservations
        self._batchers = batchers
        self._metrics = metrics

    def _version(
        self, request: inference_pb2.GenerateRequest, tenant: TenantRecord, degrade: bool
    ) -> tuple[str, VersionRecord, bool]:
        """(model, version, fallback) of a generative version the request may run on."""
        choice, version = self._service.route(tenant, request.model, request.version, request.user, degrade)
        if version.format != ModelFormat.CAUSAL_LM:
            raise fail(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"{clip(choice.model)} does not generate text: call Predict",
                Reason.INVALID_REQUEST,
            )
        limit = next((s.max_text_length for s in version.schema.inputs if s.name == PROMPT_INPUT), 0)
        if limit and prompt_chars(request) > limit:
            raise fail(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"the prompt has more than {limit} characters",
                Reason.INVALID_INPUT,
                violations=[("prompt", f"longer than {limit} characters")],
            )
        return choice.model, version, choice.fallback

    async def generate(
        self, request: inference_pb2.GenerateRequest, tenant: TenantRecord, deadline: float
    ) -> AsyncGenerator[inference_pb2.GenerateResponse]:
        """The generation's answers before ``deadline`` (event-loop time)."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        if deadline <= started:
            raise fail(
                grpc.StatusCode.DEADLINE_EXCEEDED, "the deadline passed before it arrived", Reason.DEADLINE
            )
        if bad := check_generate(request, self._settings.max_generate_tokens):
            raise fail(
                grpc.StatusCode.INVALID_ARGUMENT,
                "; ".join(f"{f}: {d}" for f, d in bad),
                Reason.INVALID_REQUEST,
                violations=bad,
            )
        model, version, fallback = self._version(request, tenant, degrade=False)
        request_id = request.request_id or uuid.uuid4().hex
        quota_id = f"{tenant.name}/{request_id}"
        bound = prompt_bound(request)
        tokens = bound + request.max_tokens
        ask = Ask(
            tokens,
            cost_of(version, tokens),
            min_tokens=bound + 1,
            cost_per_token=version.price_per_1k_tokens_usd / 1000,
        )
        # As Predict's: a repeat waits for a running first call, runs one whose router died,
        # and is answered (the whole generation in one message) from a finished one whose
        # id the application chose; sampling makes a generation another answer each time,
        # so it is never run again for free.
        keep = bool(request.request_id) and not request.generated_request_id
        verdict = await self._reservations.reserve(
            quota_id,
            tenant.name,
            model,
            ask,
            lambda: fingerprint(request),
            deadline,
            replayable=bool(request.request_id),
        )
        if verdict.repeat:
            yield inference_pb2.GenerateResponse.FromString(verdict.answer)
            return
        priority = request.priority or tenant.priority
        if verdict.decision == Decision.DEGRADE:
            # Over a soft limit: the route's fallback if it generates too, else low priority.
            with contextlib.suppress(RequestFailed):
                model, version, fallback = self._version(request, tenant, degrade=True)
            if not fallback:
                priority = common_pb2.PRIORITY_LOW
        budget = (verdict.tokens or tokens) if verdict.held else 0
        item = batcher_pb2.GenerateItem(
            request_id=f"{quota_id}/{uuid.uuid4().hex[:8]}",
            tenant=tenant.name,
            weight=tenant.weight,
            model=model,
            version=version.version,
            prompt=request.prompt,
            messages=request.messages,
            max_tokens=request.max_tokens,
            sampling=request.sampling,
            priority=cast(common_pb2.Priority, priority),
            token_budget=budget,
            stop=request.stop,
        )
        head = inference_pb2.GenerateResponse(
            request_id=request_id, model=model, version=version.version, fallback=fallback
        )
        prompt = completion = 0
        first_at = 0.0
        # What the generation said, kept in one message for the repeats of an id the
        # application chose, once it has finished (its last message: usage, finish reason).
        texts: list[str] = []
        token_ids: list[int] = []
        last: inference_pb2.GenerateResponse | None = None
        events = self._batchers.generate(item, deadline)
        try:
            try:
                async for event in events:
                    prompt, completion = event.prompt_tokens, event.completion_tokens
                    if event.token_ids and not first_at:
                        first_at = loop.time()
                    answer = inference_pb2.GenerateResponse()
                    answer.CopyFrom(head)
                    answer.text, answer.token_ids[:] = event.text, event.token_ids
                    if event.finish_reason:
                        self._finish(
                            answer, event.finish_reason, prompt, completion, version, started, first_at
                        )
                    if keep:
                        texts.append(answer.text)
                        token_ids.extend(answer.token_ids)
                        last = answer if answer.finish_reason else None
                    yield answer
            except CallFailed as failed:
                if not prompt:  # nothing started: the call fails as a Predict would
                    raise RequestFailed(failed.status) from None
                answer = inference_pb2.GenerateResponse()
                answer.CopyFrom(head)
                finish = FINISH_ON_FAILURE.get(status_code(failed.status), common_pb2.FINISH_REASON_ERROR)
                self._finish(answer, finish, prompt, completion, version, started, first_at)
                yield answer
        finally:
            await events.aclose()
            if prompt:  # it started: what it produced is charged, however it ended
                cost = cost_of(version, prompt + completion)
                usage = common_pb2.Usage(
                    items=1, input_tokens=prompt, output_tokens=completion, cost_usd=cost
                )
                self._metrics.served(tenant.name, model, usage, fallback_of=request.model if fallback else "")
                if verdict.held:
                    self._reservations.commit_later(
                        quota_id, prompt + completion, cost, _whole(last, texts, token_ids)
                    )
            elif verdict.held:
                self._reservations.release_later(quota_id)

    def _finish(
        self,
        answer: inference_pb2.GenerateResponse,
        reason: common_pb2.FinishReason,
        prompt: int,
        completion: int,
        version: VersionRecord,
        started: float,
        first_at: float,
    ) -> None:
        """Make ``answer`` the last one: its finish reason, usage and timing."""
        now = asyncio.get_running_loop().time()
        answer.finish_reason = reason
        answer.usage.CopyFrom(
            common_pb2.Usage(
                items=1,
                input_tokens=prompt,
                output_tokens=completion,
                cost_usd=cost_of(version, prompt + completion),
            )
        )
        set_seconds(answer.timing.queue, (first_at or now) - started)
        set_seconds(answer.timing.compute, now - (first_at or now))
        set_seconds(answer.timing.total, now - started)
        answer.timing.batch_size = 1


def _whole(last: inference_pb2.GenerateResponse | None, texts: list[str], token_ids: list[int]) -> bytes:
    """A finished generation as one message (its last one, with all the text and tokens), to
    keep for repeats; nothing for one that did not finish (cut by its caller leaving)."""
    if last is None:
        return b""
    whole = inference_pb2.GenerateResponse()
    whole.CopyFrom(last)
    whole.text, whole.token_ids[:] = "".join(texts), token_ids
    return whole.SerializeToString()
