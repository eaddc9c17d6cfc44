"""Inference.Generate end to end (router, batcher, node on SmolLM2, real gRPC): streamed
answers with usage and price, token limits that cut a stream at its budget (exactly once
across two routers on Redis), a caller that leaves paying only for what was produced, and
refusals that charge nothing."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator

import grpc
import pytest
from generation_platform import MODEL, PRICE_PER_1K_TOKENS, GenPlatform
from metrics_scrape import exemplars, sample

from ferryman.errors import Reason, unpack_details
from ferryman.v1 import common_pb2, inference_pb2, inference_pb2_grpc
from ferryman_server.quota.settings import QuotaSettings
from ferryman_server.registry.specs import QuotaLimits

# Left out of make test-fast: the real SmolLM2 model through every hop.
pytestmark = pytest.mark.slow

CALL_S = 120.0
FRANCE = common_pb2.ChatMessage(role="user", content="What is the capital of France?")
SETTLE_S = 5.0
BUDGET = 60
"""Tokens a minute of the limited tenants: a short story's prompt bound (~36) and then some."""
SHARED = 150


def stub(address: str) -> inference_pb2_grpc.InferenceStub:
    return inference_pb2_grpc.InferenceStub(grpc.insecure_channel(address))


def auth(key: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {key}")]


def story(**fields: object) -> inference_pb2.GenerateRequest:
    """A raw prompt that goes on and on."""
    base: dict[str, object] = {"model": MODEL, "prompt": "Once upon a time, a ferryman", "max_tokens": 24}
    return inference_pb2.GenerateRequest(**{**base, **fields})  # type: ignore[arg-type]


def chat(*messages: common_pb2.ChatMessage, **fields: object) -> inference_pb2.GenerateRequest:
    base: dict[str, object] = {"model": MODEL, "messages": list(messages), "max_tokens": 24}
    return inference_pb2.GenerateRequest(**{**base, **fields})  # type: ignore[arg-type]


def generate(
    address: str, key: str, request: inference_pb2.GenerateRequest
) -> list[inference_pb2.GenerateResponse]:
    return list(stub(address).Generate(request, metadata=auth(key), timeout=CALL_S))


def reason(error: grpc.RpcError) -> str:
    from grpc_status import rpc_status

    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None
    return str(unpack_details(status)["ErrorInfo"].reason)  # type: ignore[attr-defined]


def tokens_charged(gen: GenPlatform, tenant: str) -> float:
    return sum(
        sample(gen.router_metrics, "ferryman_tokens_total", tenant=tenant, model=MODEL, direction=d)
        for d in ("input", "output")
    )


@pytest.fixture
def key(gen: GenPlatform) -> Iterator[str]:
    yield gen.tenant()


def test_a_chat_streams_a_sensible_answer_with_usage_and_price(gen: GenPlatform, key: str) -> None:
    answers = generate(gen.router, key, chat(FRANCE))
    assert "Paris" in "".join(a.text for a in answers)
    assert all(a.model == MODEL and a.version == "1" for a in answers)
    last = answers[-1]
    assert last.finish_reason in (common_pb2.FINISH_REASON_STOP, common_pb2.FINISH_REASON_LENGTH)
    assert last.usage.output_tokens == sum(len(a.token_ids) for a in answers) <= 24
    assert last.usage.input_tokens > 10, "the chat template's tokens are prompt tokens"
    total = last.usage.input_tokens + last.usage.output_tokens
    assert last.usage.cost_usd == pytest.approx(total / 1000 * PRICE_PER_1K_TOKENS)
    assert last.timing.total.ToTimedelta() >= last.timing.queue.ToTimedelta()
    assert not any(a.finish_reason for a in answers[:-1])


def test_stop_strings_end_the_text_before_them(gen: GenPlatform, key: str) -> None:
    answers = generate(gen.router, key, chat(FRANCE, stop=["Paris"], max_tokens=32))
    text = "".join(a.text for a in answers)
    assert "Paris" not in text
    assert answers[-1].finish_reason == common_pb2.FINISH_REASON_STOP


def test_a_hard_token_limit_cuts_the_stream_at_its_budget(gen: GenPlatform) -> None:
    """A budget of tokens a minute: the first generation gets exactly that many (prompt
    included) and ends QUOTA at that step; the next is refused with a retry delay, charged
    nothing. (A raw prompt, whose bound is its bytes: a chat's template bound is ~180.)"""
    key = gen.tenant(QuotaLimits(tpm=BUDGET))
    answers = generate(gen.router, key, story(max_tokens=400))
    last = answers[-1]
    assert last.finish_reason == common_pb2.FINISH_REASON_QUOTA
    assert last.usage.input_tokens + last.usage.output_tokens == BUDGET
    with pytest.raises(grpc.RpcError) as refused:
        generate(gen.router, key, story(max_tokens=400))
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert reason(refused.value) == Reason.QUOTA_EXCEEDED


def test_a_caller_that_leaves_pays_only_for_what_was_produced(gen: GenPlatform) -> None:
    key = gen.tenant()
    name = gen.names[key]
    call = stub(gen.router).Generate(story(max_tokens=400), metadata=auth(key), timeout=CALL_S)
    seen = 0
    for answer in call:
        seen += len(answer.token_ids)
        if seen >= 3:
            break
    call.cancel()
    deadline = time.monotonic() + SETTLE_S
    while tokens_charged(gen, name) == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    charged = tokens_charged(gen, name)
    output = sample(gen.router_metrics, "ferryman_tokens_total", tenant=name, model=MODEL, direction="output")
    prompt = int(charged - output)
    assert prompt > 3 and 3 <= output < 20, (prompt, output)  # not the 400 it asked for
    running = 1.0
    while running and time.monotonic() < deadline:
        running = sample(
            gen.node_metrics, "ferryman_generation_sequences", model=MODEL, version="1", state="running"
        )
        time.sleep(0.05)
    assert running == 0, "the node's slot was freed"


def no_messages(r: inference_pb2.GenerateRequest) -> None:
    del r.messages[:]


def prompt_too(r: inference_pb2.GenerateRequest) -> None:
    r.prompt = "hi"


def bad_role(r: inference_pb2.GenerateRequest) -> None:
    r.messages[0].role = "root"


def no_tokens(r: inference_pb2.GenerateRequest) -> None:
    r.max_tokens = 0


def many_stops(r: inference_pb2.GenerateRequest) -> None:
    r.stop.extend("abcde")


def hot(r: inference_pb2.GenerateRequest) -> None:
    r.sampling.temperature = 9


def long_id(r: inference_pb2.GenerateRequest) -> None:
    r.request_id = "x" * 500


@pytest.mark.parametrize(
    ("spoil", "field"),
    [
        (no_messages, "prompt"),
        (prompt_too, "prompt"),
        (bad_role, "messages[0].role"),
        (no_tokens, "max_tokens"),
        (many_stops, "stop"),
        (hot, "sampling.temperature"),
        (long_id, "request_id"),
    ],
)
def test_bad_requests_are_refused_with_the_field(
    gen: GenPlatform, key: str, spoil: Callable[[inference_pb2.GenerateRequest], None], field: str
) -> None:
    request = chat(FRANCE)
    spoil(request)
    with pytest.raises(grpc.RpcError) as refused:
        generate(gen.router, key, request)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in (refused.value.details() or "")


def test_predict_on_a_generative_model_says_to_call_generate(gen: GenPlatform, key: str) -> None:
    request = inference_pb2.PredictRequest(model=MODEL)
    with pytest.raises(grpc.RpcError) as refused:
        stub(gen.router).Predict(request, metadata=auth(key), timeout=CALL_S)
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "Generate" in (refused.value.details() or "")


def test_a_request_id_buys_one_generation(gen: GenPlatform) -> None:
    """A repeat of a finished generation under an id the application chose is answered with
    it, whole, in one message (never run again); under a client library's own id, which
    keeps no answer, it is refused ANSWER_NOT_KEPT; another request under a used id is
    REQUEST_ID_REUSED."""
    key = gen.tenant(QuotaLimits(tpm=100_000))
    request = chat(FRANCE, request_id=f"once-{uuid.uuid4().hex[:6]}", max_tokens=4)
    first = generate(gen.router, key, request)
    assert first[-1].usage.output_tokens >= 1
    (again,) = generate(gen.router, key, request)
    assert again.text == "".join(m.text for m in first)
    assert list(again.token_ids) == [t for m in first for t in m.token_ids]
    assert again.usage == first[-1].usage and again.finish_reason == first[-1].finish_reason
    other = chat(FRANCE, request_id=request.request_id, max_tokens=5)
    with pytest.raises(grpc.RpcError) as reused:
        generate(gen.router, key, other)
    assert reused.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert reason(reused.value) == Reason.REQUEST_ID_REUSED
    own = chat(FRANCE, request_id=f"own-{uuid.uuid4().hex[:6]}", max_tokens=4)
    own.generated_request_id = True
    generate(gen.router, key, own)
    with pytest.raises(grpc.RpcError) as lost:
        generate(gen.router, key, own)
    assert lost.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert reason(lost.value) == Reason.ANSWER_NOT_KEPT


def test_a_token_limit_holds_exactly_across_two_routers_on_redis(gen: GenPlatform, redis_url: str) -> None:
    """Six generations at once, three through each router, share SHARED tokens a minute: the
    tokens served add up to at most that, each stream is settled once, and whatever did not
    fit was cut (QUOTA) or refused (RESOURCE_EXHAUSTED)."""
    quota = QuotaSettings(backend="redis", redis_url=redis_url)
    routers = (gen.start_router(quota), gen.start_router(quota))
    key = gen.tenant(QuotaLimits(tpm=SHARED), routers=routers)

    async def one(router: str) -> tuple[int, int]:
        channel = grpc.aio.insecure_channel(router)
        try:
            call = inference_pb2_grpc.InferenceStub(channel).Generate(
                story(max_tokens=60), metadata=auth(key), timeout=CALL_S
            )
            last = None
            async for answer in call:
                last = answer
            assert last is not None
            return last.usage.input_tokens + last.usage.output_tokens, last.finish_reason
        except grpc.aio.AioRpcError as exc:
            assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            return 0, -1
        finally:
            await channel.close(grace=None)

    async def all_of_them() -> list[tuple[int, int]]:
        return await asyncio.gather(*(one(routers[i % 2]) for i in range(6)))

    outcomes = asyncio.run(all_of_them())
    served = sum(tokens for tokens, _ in outcomes)
    assert 0 < served <= SHARED, outcomes
    cut = [f for _, f in outcomes if f in (-1, common_pb2.FINISH_REASON_QUOTA)]
    assert cut, f"six stories of up to ~66 tokens cannot all fit {SHARED}: {outcomes}"


def test_the_router_times_the_first_token_from_arrival_with_exemplars(gen: GenPlatform, key: str) -> None:
    """TTFT as the tenant waits it: from the request's arrival at the router (quota, batcher
    and node queues included), never less than the node's own part; TTFT and TPOT points
    carry the trace they were recorded in."""
    url, node = gen.router_metrics, gen.node_metrics
    labels = {"model": MODEL, "version": "1"}

    def figures() -> tuple[float, float, float]:
        return (
            sample(url, "ferryman_router_ttft_seconds_count", **labels),
            sample(url, "ferryman_router_ttft_seconds_sum", **labels),
            sample(node, "ferryman_generation_ttft_seconds_sum", **labels),
        )

    count, router_sum, node_sum = figures()
    answers = generate(gen.router, key, chat(FRANCE, max_tokens=8))
    assert answers[-1].usage.output_tokens > 1
    count_after, router_after, node_after = figures()
    assert count_after == count + 1
    # This generation's (other routers of this module feed the node's histogram too).
    assert router_after - router_sum >= node_after - node_sum > 0
    found = exemplars(url)
    assert found.get("ferryman_router_ttft_seconds_bucket") and found.get(
        "ferryman_router_tpot_seconds_bucket"
    )
